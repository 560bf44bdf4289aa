"""Bubu: a coding agent for long tasks whose runtime is an append-only log."""

__version__ = "0.1.0"
