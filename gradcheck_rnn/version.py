"""The package's version, in a leaf module: the report writers and emitted tests stamp it, and
importing the package root for it would run every public import first (and close a cycle)."""

__version__ = "0.1.0"
