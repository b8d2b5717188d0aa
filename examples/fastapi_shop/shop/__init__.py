"""A FastAPI + SQLAlchemy order service in which every retry lands once (README.md)."""
