"""How ``make test`` splits the suite (tests/run_suite.py): a whole run queues
every module exactly once, longest first, and the modules given to ``--ignore``
not at all (pytest runs a module named on its command line even when it is also
ignored); shards take modules from the queue (tests/support/module_queue.py);
CI's run on its PostgreSQL 15 keeps only the tests that reach the test server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest
from tests.run_suite import DURATIONS, ROOT, ignored, merged_durations, module_order, whole_suite
from tests.support import module_queue

LEFT_OUT = ["--ignore=tests/ops/test_up.py", "--ignore", "tests/gateway/views"]


def test_a_whole_run_queues_every_module_once_longest_first():
    modules = module_order()
    assert len(modules) == len(set(modules))
    assert "tests/unit/test_run_suite.py" in modules
    recorded: dict[str, float] = {}
    for test_id, seconds in json.loads(DURATIONS.read_text()).items():
        module = test_id.partition("::")[0]
        recorded[module] = recorded.get(module, 0.0) + seconds
    known = [recorded[m] for m in modules if m in recorded]
    assert known[:5] == sorted(recorded.values(), reverse=True)[:5]


def test_ignored_modules_and_folders_are_not_queued():
    assert whole_suite(LEFT_OUT)  # still the whole suite, less those
    leave_out = ignored(LEFT_OUT)
    assert leave_out == {"tests/ops/test_up.py", "tests/gateway/views"}
    modules = module_order(leave_out)
    assert "tests/ops/test_up.py" not in modules
    assert not [m for m in modules if m.startswith("tests/gateway/views/")]
    assert "tests/ops/test_up_plant.py" in modules and "tests/gateway/test_ws.py" in modules


def test_a_selection_is_left_to_pytest_split():
    assert not whole_suite(["tests/ops"])
    assert not whole_suite(["-k", "plant"])


def test_stored_durations_are_each_test_s_time_from_the_shard_that_ran_it():
    # Each shard writes the whole record it started from, with its own tests' new times:
    # the last shard's copy of the others' tests is old and must not win.
    recorded = {"a::t": 1.0, "b::t": 2.0, "c::t": 3.0}
    shard_files = [{"a::t": 10.0, "b::t": 2.0, "c::t": 3.0, "new::t": 5.0},
                   {"a::t": 1.0, "b::t": 20.0, "c::t": 3.0}]
    assert merged_durations(recorded, shard_files) == {"a::t": 10.0, "b::t": 20.0, "c::t": 3.0, "new::t": 5.0}


# A project of its own: each module's fixture and the session's write what they
# set up and tear down, so the log shows what one shard shared between modules.
# The fixtures live in a conftest below the root (pytest binds those to their
# directory's node) and the modules alternate between two folders under it.
ROOT_CONFTEST = """
from tests.support import module_queue

def pytest_configure(config):
    module_queue.register(config)
"""

LOG = """
import os

def log(line):
    with open(os.environ["QUEUE_TEST_LOG"], "a") as f:
        f.write(os.environ["LINECTL_TEST_SHARD"] + " " + line + "\\n")
"""

CONFTEST = LOG + """
import pytest

@pytest.fixture(scope="session")
def server():
    log("session up")
    yield
    log("session down")

@pytest.fixture(scope="module")
def module_thing(request, server):
    log("module up " + request.module.__name__)
    yield
    log("module down " + request.module.__name__)
"""

TEST_MODULE = LOG + """
def test_one(module_thing):
    log("ran {name}::test_one")

def test_two(module_thing):
    log("ran {name}::test_two")
"""


# The first module fails once, and waits until the other shard has claimed a
# module: both shards then take part, however fast one of them starts.
FIRST_MODULE_EXTRA = """
import os, time
from pathlib import Path

def test_fails():
    assert 0

def test_waits_for_the_other_shard():
    queue = Path(os.environ["LINECTL_QUEUE_DIR"])
    deadline = time.monotonic() + 30
    while {c.read_text() for c in queue.glob("claimed-*") if c.read_text()} != {"0", "1"}:
        assert time.monotonic() < deadline, "the other shard claimed nothing"
        time.sleep(0.02)
"""


def test_two_shards_run_each_queued_module_once_and_keep_the_session_between_modules(tmp_path):
    project, queue, log = tmp_path / "project", tmp_path / "queue", tmp_path / "log"
    for folder in ("one", "two"):
        (project / "lines" / folder).mkdir(parents=True)
    (project / "conftest.py").write_text(ROOT_CONFTEST)
    (project / "lines" / "conftest.py").write_text(CONFTEST)
    names = [f"test_m{i}" for i in range(6)]
    paths = {name: f"lines/{('one', 'two')[i % 2]}/{name}.py" for i, name in enumerate(names)}
    for name, path in paths.items():
        extra = FIRST_MODULE_EXTRA if name == "test_m0" else ""
        (project / path).write_text(TEST_MODULE.format(name=name) + extra)
    module_queue.write_queue(queue, list(paths.values()))
    # No plugins but pytest's own (nameko's, schemathesis' and hypothesis' cost a
    # second a process and play no part here).
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUEUE_TEST_LOG": str(log), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           module_queue.QUEUE_ENV: str(queue), "LINECTL_QUEUE_DIR": str(queue)}
    shards = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "--rootdir", str(project)],
                               cwd=project, env={**env, "LINECTL_TEST_SHARD": str(i)},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for i in range(2)]
    outputs = [shard.communicate(timeout=60)[0] for shard in shards]
    codes = sorted(shard.returncode for shard in shards)
    assert codes == [0, 1], outputs

    lines = log.read_text().splitlines()
    ran = [line.split()[2] for line in lines if line.split()[1] == "ran"]
    assert sorted(ran) == sorted(f"{n}::test_{k}" for n in names for k in ("one", "two")), lines
    assert "FAILED lines/one/test_m0.py::test_fails" in "".join(outputs)
    claims = module_queue.claimed_by(queue)
    assert sorted(claims) == sorted(paths.values())
    assert set(claims.values()) == {"0", "1"}
    for shard in ("0", "1"):
        mine = [line.split(" ", 1)[1] for line in lines if line.startswith(shard + " ")]
        # one session a shard, set up first and torn down last; each module's
        # fixture torn down before the next module's is set up
        assert mine[0] == "session up" and mine[-1] == "session down" and mine.count("session up") == 1, mine
        modules = [line.split()[-1] for line in mine if line.startswith("module up")]
        assert modules == [m.rpartition("/")[2].removesuffix(".py") for m, s in claims.items() if s == shard]
        for name in modules:
            up, down = mine.index(f"module up {name}"), mine.index(f"module down {name}")
            assert all(line.startswith("ran " + name) for line in mine[up + 1:down]), mine
            assert down - up == 3 or name == "test_m0", mine
    assert Path(queue / "modules").read_text().split() == list(paths.values())


def test_the_server_only_run_keeps_exactly_the_tests_that_reach_the_test_server(monkeypatch):
    def item(*fixtures):  # a bare test item: the hook reads only its fixture names
        test = object.__new__(pytest.Function)
        test.__dict__["fixturenames"] = list(fixtures)
        return test

    reaches = [item("db_url", "test_databases"), item("test_databases")]
    elsewhere = [item(), item("tmp_path")]
    module = object.__new__(pytest.Module)  # the module queue passes modules' nodes too
    deselected = []
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))

    items = [module, elsewhere[0], reaches[0], elsewhere[1], reaches[1]]
    conftest.pytest_collection_modifyitems(config, items)
    assert items == [module, elsewhere[0], reaches[0], elsewhere[1], reaches[1]] and not deselected  # a normal run

    monkeypatch.setenv(conftest.SERVER_TESTS_ONLY_ENV, "1")
    conftest.pytest_collection_modifyitems(config, items)
    assert items == [module, *reaches]
    assert deselected == elsewhere
