"""Fixtures for tests that run the stack as real processes."""

import importlib.util

import pytest

from tests.conftest import _private_vhost, _rabbit_answers
from tests.ops.stack import Stack


@pytest.fixture
def transport_env():
    """The stack's message transport: ``pgsql://`` on its own database when that
    transport exists (nothing to set), else a private RabbitMQ vhost."""
    if importlib.util.find_spec("shared.transport.pgsql") is not None:
        yield {}
        return
    if not _rabbit_answers():
        pytest.skip("RabbitMQ does not answer on 127.0.0.1:5672 and there is no pgsql transport")
    vhost = _private_vhost()
    if vhost is None:
        pytest.skip("rabbitmqctl is not usable: no private vhost for the stack")
    yield {"LINECTL_AMQP_URI": f"amqp://guest:guest@127.0.0.1:5672/{vhost}"}
    import subprocess
    subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=30)


@pytest.fixture
def stack_factory(tmp_path, transport_env):
    stacks = []

    def make(**kw):
        stack = Stack(tmp_path / f"data{len(stacks)}", transport_env, **kw)
        stacks.append(stack)
        return stack
    yield make
    for stack in stacks:
        stack.cleanup()
