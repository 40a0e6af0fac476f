"""Pulumi ComponentResources, one per concern (see ``contracts`` for what they hand each other)."""
