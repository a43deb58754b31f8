"""A whole-suite shard takes its test modules from a queue it shares with the
other shards, one module at a time, instead of a list fixed before the run.

Why: a split fixed in advance by recorded durations ends its shards far apart
(on a fresh clone 247-290 s, once 268-338 s): on 2 cores a module's time depends
on what the other shards run beside it, so the record is only ever roughly right.
From a queue, a shard that runs ahead takes more, and the shards end within about
one module of each other. The queue lists the modules longest first (recorded
durations), so what is left at the end is short.

How: ``tests/run_suite.py`` writes the modules, one a line, to
``$LINECTL_TEST_MODULE_QUEUE/modules``. A shard claims the next unclaimed line by
creating ``claimed-<line>`` with ``O_EXCL`` (the file system is the lock; the
shards share nothing else), collects that module's tests (``Session.genitems``,
as pytest's own collection does; the tree above the modules is collected once,
at the start, without importing any) and runs them with pytest's own
``pytest_runtest_protocol``. It claims and collects the next module before the
last test of this one runs: pytest tears down what the next test does not share
(this module's fixtures) and keeps the rest (the session's database server),
exactly as in a run collected up front.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

QUEUE_ENV = "LINECTL_TEST_MODULE_QUEUE"
MODULES_FILE = "modules"


def write_queue(directory: Path, modules: list[str]) -> None:
    """The queue the shards will share: ``modules`` in the order they are taken."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MODULES_FILE).write_text("".join(f"{m}\n" for m in modules))


def claimed_by(directory: Path) -> dict[str, str]:
    """Module -> the shard that ran it (what the claim files say)."""
    modules = (directory / MODULES_FILE).read_text().split()
    out = {}
    for index, module in enumerate(modules):
        claim = directory / f"claimed-{index}"
        if claim.exists():
            out[module] = claim.read_text()
    return out


class ModuleQueue:
    """The plugin a shard registers when ``LINECTL_TEST_MODULE_QUEUE`` is set."""

    def __init__(self, directory: Path, shard: str):
        self.directory = directory
        self.shard = shard
        self.modules = (directory / MODULES_FILE).read_text().split()
        self.cursor = 0  # every line before it was claimed, by this shard or another
        self.collected = 0
        self.module_nodes: dict[str, pytest.Collector] = {}

    def claim(self) -> str | None:
        while self.cursor < len(self.modules):
            index, self.cursor = self.cursor, self.cursor + 1
            try:
                fd = os.open(self.directory / f"claimed-{index}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as claim:
                claim.write(self.shard)
            return self.modules[index]
        return None

    def next_items(self, session: pytest.Session) -> list[pytest.Item]:
        """The tests of the next module this shard claims that has any (a module
        whose tests are all deselected has none); [] when the queue is empty."""
        while (module := self.claim()) is not None:
            items = list(session.genitems(self.module_nodes[module]))  # imports it
            session.config.hook.pytest_collection_modifyitems(session=session, config=session.config, items=items)
            self.collected += len(items)
            session.testscollected = self.collected
            if items:
                return items
        return []

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> bool:
        # Every queued module's node, down to the module but not into it: the
        # directories (and their conftests' fixtures, which pytest binds to the
        # directory's node) are collected once, the modules imported when claimed.
        nodes = session.perform_collect(self.modules, genitems=False)
        self.module_nodes = {node.nodeid: node for node in nodes}
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if session.config.option.collectonly:
            return None  # pytest's own loop (there is nothing to run)
        items = self.next_items(session)
        while items:
            following: list[pytest.Item] = []
            for position, item in enumerate(items):
                if position + 1 < len(items):
                    nextitem = items[position + 1]
                else:
                    following = self.next_items(session)
                    nextitem = following[0] if following else None
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                if session.shouldfail:
                    raise session.Failed(session.shouldfail)
                if session.shouldstop:
                    raise session.Interrupted(session.shouldstop)
            items = following
        return True


def register(config: pytest.Config) -> None:
    directory = os.environ.pop(QUEUE_ENV, None)  # not for the processes the tests start
    if directory:
        shard = os.environ.get("LINECTL_TEST_SHARD", "0")
        config.pluginmanager.register(ModuleQueue(Path(directory), shard), "linectl-module-queue")
