"""Test databases: one PostgreSQL server per test session, one fresh database
per test, cloned from a migrated template. A clone takes 0.3 to 0.6 s (PostgreSQL
15 copies the template block by block), so the suite's session makes the next
test's clone while a test runs (``ahead``)."""

from __future__ import annotations

import os
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import eventlet
import psycopg2
from sqlalchemy import text
from sqlalchemy.engine import Engine

from services.stack.migrate import upgrade
from shared.db.embedded import EmbeddedPostgres
from tests.support.cluster_storage import memory_dir
from tests.support.ports import free_port


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def admin_execute(server_url: str, *statements: str) -> None:
    conn = psycopg2.connect(with_database(server_url, "postgres"))
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


_SHARED_SLICE: dict[str, int] = {}


def connection_budget(url: str, want: int) -> int:
    """How many connections one test may hold at once: ``want`` on the shard's
    own embedded server (max_connections=300, no other shard on it). On a
    server the shards share (``LINECTL_TEST_DATABASE_URL``: CI's PostgreSQL 15
    keeps the default max_connections=100), a slice that leaves every other
    shard its services, gateways and transports: a test of 50 runtimes racing
    on 62 connections in two shards at once took the server past its limit,
    and every other test of the run failed to connect."""
    if not os.environ.get("LINECTL_TEST_DATABASE_URL"):
        return want
    if url not in _SHARED_SLICE:
        conn = psycopg2.connect(url)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT current_setting('max_connections')::int"
                            " - current_setting('superuser_reserved_connections')::int")
                usable = cur.fetchone()[0]
        finally:
            conn.close()
        shards = int(os.environ.get("LINECTL_TEST_SHARDS", "3") or 3)
        # a shard's own stack (services, gateway, transport, fixtures) peaks near 25
        _SHARED_SLICE[url] = max(8, usable // shards - 25)
    return min(want, _SHARED_SLICE[url])


@contextmanager
def database_down(url: str):
    """The database of ``url`` as if its server were down: every session to it
    is cut and none is let in until the block ends (the server's other
    databases, other tests', are untouched)."""
    name = urlsplit(url).path.lstrip("/")
    admin_execute(url, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false',
                  f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
    try:
        yield
    finally:
        admin_execute(url, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


class RowQueries:
    """``row`` and ``rows`` of an SQL statement on ``self.engine``: what a test
    harness reads the database with."""

    engine: Engine

    def row(self, sql, **params):
        with self.engine.connect() as c:
            return c.execute(text(sql), params).first()

    def rows(self, sql, **params):
        with self.engine.connect() as c:
            return c.execute(text(sql), params).fetchall()


class TestDatabases:
    """A server for the session plus a migrated template to clone from.

    ``ahead``: each migrated clone handed out starts the next one in a green thread
    (eventlet makes psycopg2 cooperative: it runs while the test waits on anything),
    so a test's set-up seldom waits for one. Not for benchmarks: it runs beside them."""

    def __init__(self, ahead: bool = False):
        external = os.environ.get("LINECTL_TEST_DATABASE_URL")
        self.embedded: EmbeddedPostgres | None = None
        self._tmp = None
        if external:
            self.server_url = external
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="linectl-test-pg-", dir=memory_dir())
            self.embedded = EmbeddedPostgres(Path(self._tmp.name) / "pg", port=free_port(), fast=True)
            self.server_url = self.embedded.start()
        self.prefix = f"lt{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.template = f"{self.prefix}_tpl"
        self.created: list[str] = []
        self.ahead = ahead
        # On the shard's own throw-away cluster (fsync off), a clone copies the template's
        # files: 0.028 CPU-s a clone and drop, against 0.05 through the WAL (the default
        # since PostgreSQL 15). Its checkpoints would flush to disk on a server that syncs.
        self._strategy = " STRATEGY FILE_COPY" if self.embedded is not None else ""
        self._next = None  # the green thread making the next migrated clone
        admin_execute(self.server_url, f'DROP DATABASE IF EXISTS "{self.template}"',
                      f'CREATE DATABASE "{self.template}"')
        upgrade(with_database(self.server_url, self.template))
        self.created.append(self.template)

    def fresh(self, migrated: bool = True) -> str:
        if not migrated:
            return self._clone("template0")
        ready, self._next = self._next, None
        if self.ahead:
            self._next = eventlet.spawn(self._clone, self.template)
        return ready.wait() if ready is not None else self._clone(self.template)

    def _clone(self, template: str) -> str:
        name = f"{self.prefix}_{uuid.uuid4().hex[:10]}"
        self.created.append(name)  # before it exists: close() drops it whatever happens
        admin_execute(self.server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"{self._strategy}')
        return with_database(self.server_url, name)

    def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        admin_execute(self.server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def close(self) -> None:
        if self._next is not None:
            try:
                self._next.wait()
            except psycopg2.Error:
                pass
        for name in list(self.created):
            try:
                admin_execute(self.server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg2.Error:
                pass
        if self.embedded is not None:
            self.embedded.remove()
        if self._tmp is not None:
            self._tmp.cleanup()
