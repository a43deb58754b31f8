"""Under eventlet's monkey patch (as in every nameko process) psycopg2 is
cooperative: a slow query does not stall other green threads."""

import time

import eventlet
import psycopg2


def test_a_slow_query_does_not_stall_other_green_threads(db_url):
    ticks = []

    def ticker():
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            ticks.append(time.monotonic())
            eventlet.sleep(0.01)

    def slow_query():
        conn = psycopg2.connect(db_url)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_sleep(0.5)")
        finally:
            conn.close()

    started = time.monotonic()
    query = eventlet.spawn(slow_query)
    tick = eventlet.spawn(ticker)
    query.wait()
    tick.wait()
    # Had the query blocked the hub, the ticker would have run only after it.
    during = [t for t in ticks if t < started + 0.45]
    assert len(during) >= 20, f"only {len(during)} ticks while the query ran"
