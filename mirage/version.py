"""mirage's version, recorded in every result (a module of its own, so that recording it imports nothing else)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
