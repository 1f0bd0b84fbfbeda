"""Lockgate provider: triggers."""
