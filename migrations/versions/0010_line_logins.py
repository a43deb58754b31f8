"""Revision 0010 (after 0009): a line's processes log in as their line's own role
(PRODUCT.md, "Line credentials"), and the transport's liveness check sees other
logins' backends.

The pgsql:// transport judges a consumer, a lease or an exclusive queue alive
while ``pg_stat_activity`` shows its backend with the same start time. PostgreSQL
shows another login's ``backend_start`` only to that login, its members and
``pg_read_all_stats``, so a line's login would take every other login's consumers
for dead (and the gateway's reply queues with them). ``mq_backend_started(pid)``
answers that one column for any backend, as its owner (the migrating user, who
sees them all: a superuser, or a member of every line's role) sees it, and
nothing else (``pg_read_all_stats`` would also show every session's SQL text).
A new function; nothing existing is locked."""
from alembic import op

revision = '0010'
down_revision = '0009'

BACKEND_STARTED = """
CREATE OR REPLACE FUNCTION mq_backend_started(pid integer) RETURNS timestamptz
LANGUAGE sql STABLE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT backend_start FROM pg_stat_get_activity(pid) $$"""


def upgrade() -> None:
    op.execute(BACKEND_STARTED)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS mq_backend_started(integer)")
