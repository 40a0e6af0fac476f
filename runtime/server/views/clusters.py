"""Placeholder blueprint (filled in by its owner)."""

from flask import Blueprint

bp = Blueprint("clusters", __name__)
