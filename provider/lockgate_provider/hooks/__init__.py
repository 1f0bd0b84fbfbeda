"""Lockgate provider: hooks."""
