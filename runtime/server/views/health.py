"""Placeholder blueprint (filled in by its owner)."""

from flask import Blueprint

bp = Blueprint("health", __name__)
