"""linectl's own tools follow the primary too (issue 40): ``migrate``, ``purge``
and ``backup`` are given the multi-host URL whose first host is a demoted
primary (it still answers, read-only, with what it had) and whose second is the
promoted standby. Each reaches the new primary by ``target_session_attrs``: one
that took the first host would fail to write (migrate, purge) or dump a server
that no longer leads (backup)."""

from __future__ import annotations

import subprocess

import pytest

from tests.ops.test_backup_restore import linectl
from tests.support.replica_pair import ReplicaPair


@pytest.fixture
def failed_over():
    pair = ReplicaPair().start()
    pair.demote()
    pair.promote()
    yield pair
    pair.stop()


def test_migrate_purge_and_backup_reach_the_new_primary(failed_over, tmp_path):
    url = failed_over.url
    assert url.index(f":{failed_over.primary_port}") < url.index(f":{failed_over.standby_port}")
    for args in (("migrate",), ("purge",)):
        out = linectl(*args, database_url=url, data_dir=tmp_path)
        assert out.returncode == 0, f"linectl {' '.join(args)}: {out.stderr}"
    leader = ReplicaPair.connect(failed_over.standby_port, failed_over.database)
    try:
        with leader.cursor() as cur:
            cur.execute("SELECT count(*) FROM alembic_version")
            assert cur.fetchone()[0] == 1
    finally:
        leader.close()
    dump = tmp_path / "linectl.dump"
    out = linectl("backup", str(dump), database_url=url, data_dir=tmp_path)
    assert out.returncode == 0, out.stderr
    listing = subprocess.run([failed_over.tool("pg_restore"), "--list", str(dump)],
                             capture_output=True, text=True, check=True).stdout
    assert "TABLE public work_order" in listing  # the new primary's schema, which the old one lacks
