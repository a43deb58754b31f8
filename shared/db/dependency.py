"""The database as a nameko DependencyProvider.

Workers get a ``sessionmaker`` bound to the service's engine (one engine per
container, created at setup from ``LINECTL_DATABASE_URL`` in the nameko config
and disposed at stop). Use it as a unit of work::

    with self.db.begin() as session:   # commits on success, rolls back on error
        ...
"""

from __future__ import annotations

from nameko.extensions import DependencyProvider

from shared.db.engine import make_engine, make_sessionmaker


class Database(DependencyProvider):
    def __init__(self, pool_size: int = 5):
        self.pool_size = pool_size
        self.engine = None
        self.sessionmaker = None

    def setup(self):
        url = self.container.config.get("LINECTL_DATABASE_URL")
        if not url:
            raise RuntimeError("nameko config has no LINECTL_DATABASE_URL")
        self.engine = make_engine(url, pool_size=self.pool_size)
        self.sessionmaker = make_sessionmaker(self.engine)

    def stop(self):
        if self.engine is not None:
            self.engine.dispose()

    def kill(self):
        self.stop()

    def get_dependency(self, worker_ctx):
        return self.sessionmaker
