"""Lockgate runtime: the Spark session and what runs on it."""
