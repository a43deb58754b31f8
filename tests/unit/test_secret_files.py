"""A secret generated once: concurrent first starts agree on one whole value."""

import threading
import time

from shared.secret_files import read_or_create_private


def test_concurrent_first_starts_read_the_one_whole_value(tmp_path):
    path = tmp_path / "key"
    made = iter(range(100))

    def slow_make() -> bytes:
        value = f"value-{next(made)}".encode()
        time.sleep(0.2)  # the winner is still writing while the others look
        return value

    seen: list[bytes] = []
    racers = [threading.Thread(target=lambda: seen.append(read_or_create_private(path, slow_make)))
              for _ in range(6)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(10)
    assert len(seen) == 6 and len(set(seen)) == 1 and seen[0].startswith(b"value-")
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["key"]  # nothing staged is left
    assert read_or_create_private(path, slow_make) == seen[0]
