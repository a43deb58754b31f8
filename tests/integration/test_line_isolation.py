"""A line's controller cannot touch another line's rows: PostgreSQL refuses it,
whatever the code does (PRODUCT.md, "Plant", isolation; ``shared.db.lines``).

Proven with the line role's own connection: a login that is a member of
``linectl_line_<id>`` only, as a line on another host connects. It reaches its
own line's tables, and every way to another line's (a qualified name, its own
``search_path``, ``SET ROLE``) is refused. Ids stay unique across the plant,
and each line numbers its own ``seq``."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from shared.db.engine import make_engine
from shared.db.lines import register_lines
from shared.db.retention import RetentionPolicy, purge

LINES = ["cell-a", "cell-b", "cell-c"]
ORDER = ("INSERT INTO work_order (code, product_id, route, quantity) VALUES (:c, 'P', '[]', 1) RETURNING id")


def _as_user(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


@pytest.fixture
def plant(engine):
    with engine.begin() as conn:
        return register_lines(conn, LINES, default="cell-a")


@pytest.fixture
def line_b_login(db_url, engine, plant):
    """A login role that holds line cell-b's role and nothing else."""
    user, password = f"t_line_b_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with engine.begin() as conn:
        conn.execute(text(f"CREATE ROLE {user} LOGIN PASSWORD '{password}' IN ROLE \"{plant['cell-b'].role}\""))
        conn.execute(text(f"GRANT CONNECT ON DATABASE {urlsplit(db_url).path.lstrip('/')} TO {user}"))
    line_engine = make_engine(_as_user(db_url, user, password), pool_size=1, role=plant["cell-b"].role,
                              schema=plant["cell-b"].schema)
    yield line_engine
    line_engine.dispose()
    with engine.begin() as conn:
        conn.execute(text(f"DROP OWNED BY {user}"))
        conn.execute(text(f"DROP ROLE {user}"))


def _refused(line_engine, sql: str) -> str:
    with pytest.raises(DBAPIError) as caught, line_engine.begin() as conn:
        conn.execute(text(sql))
    return str(caught.value.orig).splitlines()[0]


def test_a_line_role_reaches_its_own_tables_and_no_other_line_s(engine, plant, line_b_login):
    assert plant["cell-a"].schema == "public"  # the first line keeps a one-line database's tables
    assert {p.schema for p in plant.values()} == {"public", "line_cell-b", "line_cell-c"}
    with engine.begin() as conn:  # the other lines have rows to steal
        conn.execute(text(ORDER), {"c": "A-1"})
        conn.execute(text('INSERT INTO "line_cell-c".work_order (code, product_id, route, quantity)'
                          " VALUES ('C-1', 'P', '[]', 1)"))
    with line_b_login.begin() as conn:
        own = conn.execute(text(ORDER), {"c": "B-1"}).scalar()
        assert conn.execute(text("SELECT code FROM work_order")).scalars().all() == ["B-1"]
        assert conn.execute(text("SELECT count(*) FROM dock")).scalar() == 1
        # a generated order code's number comes from the plant's id sequence, in its own schema too
        assert conn.execute(text("SELECT next_work_order_number()")).scalar() > own
    for sql in ("SELECT * FROM public.work_order", 'SELECT * FROM "line_cell-c".work_order',
                "UPDATE public.work_order SET priority = 1", 'DELETE FROM "line_cell-c".job',
                "INSERT INTO public.event_log (seq, tx_id, type) VALUES (99, 1, 'X')",
                "SET search_path = public; SELECT * FROM work_order"):
        assert "permission denied" in _refused(line_b_login, sql), sql
    for other_role in ("linectl_controller", plant["cell-c"].role, "linectl_gateway"):
        assert "permission denied to set role" in _refused(line_b_login, f'SET ROLE "{other_role}"')
    with engine.connect() as conn:  # ids are the plant's: the line's order took the next one
        ids = conn.execute(text("SELECT id FROM public.work_order UNION ALL SELECT id FROM \"line_cell-c\".work_order"
                                " UNION ALL SELECT id FROM \"line_cell-b\".work_order")).scalars().all()
    assert own in ids and len(set(ids)) == 3


def test_each_line_numbers_its_own_seq_and_keeps_its_own_keys(engine, plant):
    with engine.begin() as conn:
        for schema in ("public", '"line_cell-b"'):
            conn.execute(text(f"INSERT INTO {schema}.event_log (seq, tx_id, type) VALUES (1, 1, 'X')"))
            conn.execute(text(f"INSERT INTO {schema}.equipment (id, name, kind, slot_count)"
                              " VALUES ('MC1', 'MC1', 'MACHINE', 1)"))  # both lines may have an MC1
    with pytest.raises(DBAPIError), engine.begin() as conn:  # a line's own keys still hold
        conn.execute(text('INSERT INTO "line_cell-b".event_log (seq, tx_id, type) VALUES (1, 2, \'Y\')'))
    with pytest.raises(DBAPIError), engine.begin() as conn:  # and so do its foreign keys, in its schema
        conn.execute(text('INSERT INTO "line_cell-b".equipment_slot (equipment_id, slot_no) VALUES (\'MC9\', 1)'))


def test_registering_again_changes_nothing_and_keeps_each_line_where_it_is(engine, plant):
    with engine.begin() as conn:  # the plant file reordered: the default line is now cell-c
        again = register_lines(conn, list(reversed(LINES)) + ["cell-d"], default="cell-c")
    assert {k: again[k] for k in LINES} == plant
    assert again["cell-d"].schema == "line_cell-d"


def test_retention_purges_every_line_s_old_events_and_keeps_each_line_s_newest(engine, plant):
    with engine.begin() as conn:
        for schema in ("public", '"line_cell-b"'):
            conn.execute(text(f"INSERT INTO {schema}.event_log (seq, tx_id, type, at) VALUES"
                              " (1, 1, 'Old', now() - interval '400 days'),"
                              " (2, 2, 'Old', now() - interval '400 days')"))
    counts = purge(engine, RetentionPolicy(event_days=30))
    assert counts["event_log"] == 2
    with engine.connect() as conn:
        for schema in ("public", '"line_cell-b"'):
            assert conn.execute(text(f"SELECT seq FROM {schema}.event_log")).scalars().all() == [2]
