"""Lockgate provider: links."""
