"""The PostgreSQL-backed kombu transport (``pgsql://``)."""
