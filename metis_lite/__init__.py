"""metis-lite: hybrid search in which each base is one SQLite file."""

__version__ = "0.1.0"
