"""This release's version, where any module may read it without importing the package's API
(the schema records which release applied each migration)."""

__version__ = "0.1.0"
