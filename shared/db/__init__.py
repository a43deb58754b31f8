"""Database access shared by every process: models, engines, the embedded server."""
