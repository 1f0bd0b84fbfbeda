"""The version of the lockgate package (one place: the package and its workers read it here)."""

__version__ = "0.1.0"
