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

from tests.support.cluster_storage import keep_clusters_in_memory, remove_clusters_linked_under  # noqa: E402

keep_clusters_in_memory()  # before shared.db.embedded reads where clusters live

import importlib.util  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import uuid  # noqa: E402

import pytest  # noqa: E402
from kombu.mixins import ConsumerMixin  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from shared.config import Settings  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from shared.layout import load_layout  # noqa: E402
from tests.support import hung_tests, module_queue, stall_report  # noqa: E402
from tests.support.db import TestDatabases  # noqa: E402
from tests.support.ports import answers  # noqa: E402


def pytest_configure(config):
    config.option.suppress_eventlet_notification = True
    config.pluginmanager.register(stall_report, "linectl-stall-report")
    config.pluginmanager.register(hung_tests, "linectl-hung-tests")  # before pytest-timeout's own timer
    module_queue.register(config)  # a whole-suite shard of tests/run_suite.py


# CI's second run, on its PostgreSQL 15 (.ci/run), runs again only what reaches the
# test server: every path there is the ``test_databases`` fixture. A test without it
# (a unit, a simulator, a cluster of its own) would re-prove what the first run proved.
SERVER_TESTS_ONLY_ENV = "LINECTL_TEST_SERVER_TESTS_ONLY"


def _kept_for_the_server(node) -> bool:
    # Tests only: the module queue passes its modules' nodes here too, uncollected.
    return not isinstance(node, pytest.Item) or "test_databases" in node.fixturenames


def pytest_collection_modifyitems(config, items):
    if os.environ.get(SERVER_TESTS_ONLY_ENV) != "1":
        return
    elsewhere = [item for item in items if not _kept_for_the_server(item)]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if _kept_for_the_server(item)]


# nameko's QueueConsumer sees a stop or a kill only when ``drain_events`` returns,
# and kombu's ConsumerMixin drains with a 1 s timeout: every container stop or kill
# in a test waited out that second (twice when a container both stops its Rpc
# entrypoints and its consumer). The tests' containers drain in short slices; the
# services' own processes keep kombu's 1 s.
CONSUMER_STOP_POLL = 0.05
_kombu_consume = ConsumerMixin.consume


def _consume_in_short_slices(self, limit=None, timeout=None, safety_interval=CONSUMER_STOP_POLL, **kwargs):
    return _kombu_consume(self, limit, timeout, min(safety_interval, CONSUMER_STOP_POLL), **kwargs)


ConsumerMixin.consume = _consume_in_short_slices


@pytest.fixture(autouse=True)
def fast_teardown(request):
    """Replaces nameko's fixture of that name: containers and runners must be
    torn down BEFORE the test's database is dropped, because with ``pgsql://``
    the message transport lives in that database (a consumer whose database
    vanished would sit reconnecting). Setting ``db_url`` up first makes pytest
    tear it down last."""
    for name in ("db_url", "container_factory", "runner_factory"):
        if name in request.fixturenames:
            request.getfixturevalue(name)
    yield


# The passwords the suite signs in with, and the start of every argon2 hash: no log
# record of any test may hold one (issue 39: nothing about a password is ever logged).
NEVER_LOGGED = ("correct horse battery", "another long password", "$argon2")


@pytest.fixture(autouse=True)
def no_secret_is_logged(caplog):
    yield
    for record in caplog.get_records("setup") + caplog.get_records("call"):
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: its raw parts
            message = f"{record.msg} {record.args}"
        leaked = [secret for secret in NEVER_LOGGED if secret in message]
        assert not leaked, f"{record.name} logged a password or a hash: {message[:200]!r}"


@pytest.fixture(scope="session")
def layout():
    """The line layout of the default settings (deploy/line.yaml here)."""
    return load_layout(Settings().line_file)


@pytest.fixture(scope="session", autouse=True)
def no_cluster_left_behind(tmp_path_factory):
    """As root an embedded cluster lives apart from its data directory
    (shared.db.embedded): those of the session's tests go with the session."""
    yield
    remove_clusters_linked_under(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def test_databases():
    dbs = TestDatabases(ahead=True)
    stall_report.database_server.update(
        url=dbs.server_url, psql=dbs.embedded._bin("psql") if dbs.embedded else "psql")
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
    return answers(port, host)


def _private_vhost() -> str | None:
    """A vhost of our own, so concurrent test sessions never share queues."""
    name = f"linectl-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        for args in (["add_vhost", name], ["set_permissions", "-p", name, "guest", ".*", ".*", ".*"]):
            subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return name


@pytest.fixture(scope="session")
def rabbit_uri():
    """A RabbitMQ URI (on a private vhost when rabbitmqctl is usable).

    Skips when no broker answers, except in CI where RabbitMQ is required."""
    base = os.environ.get("LINECTL_TEST_RABBIT_URI")
    if base:
        yield base
        return
    if not _rabbit_answers():
        if os.environ.get("CI") or os.environ.get("LINECTL_REQUIRE_RABBITMQ"):
            pytest.fail("RabbitMQ is required here (CI) but does not answer on 127.0.0.1:5672")
        pytest.skip("RabbitMQ does not answer on 127.0.0.1:5672; its half of the suite is skipped")
    vhost = _private_vhost()
    yield f"amqp://guest:guest@127.0.0.1:5672/{vhost or ''}"
    if vhost:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=30)


def _pgsql_transport_available() -> bool:
    try:
        return importlib.util.find_spec("shared.transport.pgsql") is not None
    except ModuleNotFoundError:
        return False


@pytest.fixture
def amqp_uri(request, db_url):
    """The message transport for a test: ``pgsql://`` on the test's own
    database (the product's default), or RabbitMQ until that transport exists."""
    if _pgsql_transport_available():
        return "pgsql://" + db_url.split("://", 1)[1]
    return request.getfixturevalue("rabbit_uri")


@pytest.fixture
def nameko_config(amqp_uri, db_url):
    """A nameko config for containers under test (same keys as shared.config.nameko_config)."""
    return {
        "AMQP_URI": amqp_uri,
        "serializer": "json",
        "LINECTL_DATABASE_URL": db_url,
        "max_workers": 20,
    }
