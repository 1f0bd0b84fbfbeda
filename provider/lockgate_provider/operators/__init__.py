"""Lockgate provider: operators."""
