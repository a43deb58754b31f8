"""The embedded server's port test decides as PostgreSQL's own bind would."""

import socket

from shared.db.embedded import _port_free
from tests.support.ports import free_port


def _time_wait_on(port: int) -> None:
    """Leave a connection in TIME_WAIT on ``port`` (the side that closes first keeps it)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(1)
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's end closes first: TIME_WAIT on 127.0.0.1:port
        client.recv(1)
        client.close()


def test_a_port_with_only_time_wait_connections_is_free():
    port = free_port()
    _time_wait_on(port)
    assert _port_free(port)


def test_a_port_someone_listens_on_is_taken():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        assert not _port_free(listener.getsockname()[1])
