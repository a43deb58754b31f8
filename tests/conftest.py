"""Suite-wide fixtures.

eventlet is monkey-patched first, as in every nameko process (nameko's pytest
plugin no longer does it). Then: one PostgreSQL server per session (embedded,
or ``LINECTL_TEST_DATABASE_URL``'s server) and a fresh migrated database per
test that asks for ``db_url``.
"""

import warnings

# eventlet warns that it is in bugfix mode; nameko 2.14 has no other concurrency.
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

import eventlet  # noqa: E402

eventlet.monkey_patch()

import os  # noqa: E402
import socket  # noqa: E402

import pytest  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from shared.db.engine import make_engine  # noqa: E402
from tests.support.db import TestDatabases  # noqa: E402


def pytest_configure(config):
    config.option.suppress_eventlet_notification = True


@pytest.fixture(scope="session")
def test_databases():
    dbs = TestDatabases()
    yield dbs
    dbs.close()


@pytest.fixture
def db_url(test_databases):
    """A fresh database at the migrations' head, dropped after the test."""
    url = test_databases.fresh()
    yield url
    test_databases.drop(url)


@pytest.fixture
def empty_db_url(test_databases):
    """A fresh database with no tables at all."""
    url = test_databases.fresh(migrated=False)
    yield url
    test_databases.drop(url)


@pytest.fixture
def engine(db_url):
    eng = make_engine(db_url, pool_size=2)
    yield eng
    eng.dispose()


@pytest.fixture
def session(engine):
    with Session(engine) as s:
        yield s


def _rabbit_answers(host="127.0.0.1", port=5672) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def rabbit_uri():
    """The RabbitMQ URI; skips when none answers, except in CI where it is required."""
    uri = os.environ.get("LINECTL_TEST_RABBIT_URI", "amqp://guest:guest@127.0.0.1:5672//")
    if not _rabbit_answers():
        if os.environ.get("CI") or os.environ.get("LINECTL_REQUIRE_RABBITMQ"):
            pytest.fail("RabbitMQ is required here (CI) but does not answer on 127.0.0.1:5672")
        pytest.skip("RabbitMQ does not answer on 127.0.0.1:5672; its half of the suite is skipped")
    return uri
