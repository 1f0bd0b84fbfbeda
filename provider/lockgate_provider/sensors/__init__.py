"""Lockgate provider: sensors."""
