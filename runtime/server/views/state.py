"""Placeholder blueprint (filled in by its owner)."""

from flask import Blueprint

bp = Blueprint("state", __name__)
