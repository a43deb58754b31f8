"""Alembic migrations: every table of the project, the transport's included."""
