"""Revision 0012 (after 0011): piece traceability (issue 54; PRODUCT.md, "Piece
traceability").

In every line's schema (``shared.db.lines.line_schemas``): ``job.serial``, and the
piece records the loop writes from now on in the transaction of each change
(``piece``, ``piece_step``, ``piece_entry``; ``shared.piece_record``). New tables
and a nullable column: nothing existing is rewritten or locked for long.

The records of the jobs already in the database are rebuilt from what each
line's event log still holds (``rebuild_from_log``); the upgrade says, per line,
how many finished pieces it could not rebuild (their events were purged: their
record has the job's own facts, and the history the log still had). Not
partitioned by time: docs/traceability.md says why."""
import logging
import sys

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from shared.db.lines import PUBLIC, add_line_tables, line_schemas, quote
from shared.piece_rebuild import rebuild_from_log

revision = '0012'
down_revision = '0011'

log = logging.getLogger("alembic.runtime.migration")
TABLES = ("piece_entry", "piece_step", "piece")


def _create(schema: str) -> None:
    op.add_column('job', sa.Column('serial', sa.String(200), nullable=True), schema=schema)
    op.create_table(
        'piece',
        sa.Column('job_id', sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column('serial', sa.String(200), nullable=False),
        sa.Column('work_order_id', sa.BigInteger(), nullable=False),
        sa.Column('work_order_code', sa.String(200), nullable=True),
        sa.Column('product_id', sa.String(64), nullable=True),
        sa.Column('status', sa.String(16), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('job_id', name='pk_piece'),
        schema=schema,
    )
    op.create_index('ix_piece_serial', 'piece', ['serial'], schema=schema)
    op.create_index('ix_piece_created_at', 'piece', ['created_at', 'job_id'], schema=schema)
    op.create_index('ix_piece_work_order_id', 'piece', ['work_order_id', 'job_id'], schema=schema)
    op.create_index('ix_piece_finished_at', 'piece', ['finished_at'], schema=schema,
                    postgresql_where=sa.text('finished_at IS NOT NULL'))
    op.create_table(
        'piece_step',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column('job_id', sa.BigInteger(), nullable=False),
        sa.Column('step_index', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(64), nullable=False),
        sa.Column('equipment_id', sa.String(64), nullable=True),
        sa.Column('slot_no', sa.SmallInteger(), nullable=True),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('result', sa.String(32), nullable=True),
        sa.Column('values', postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.PrimaryKeyConstraint('id', name='pk_piece_step'),
        schema=schema,
    )
    op.create_index('ix_piece_step_job_id', 'piece_step', ['job_id', 'started_at'], schema=schema)
    op.create_index('ix_piece_step_equipment_id', 'piece_step', ['equipment_id', 'started_at'], schema=schema)
    op.create_index('ix_piece_step_open', 'piece_step', ['job_id'], schema=schema,
                    postgresql_where=sa.text('ended_at IS NULL'))
    op.create_table(
        'piece_entry',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column('job_id', sa.BigInteger(), nullable=False),
        sa.Column('category', sa.String(16), nullable=False),
        sa.Column('at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('detail', postgresql.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.CheckConstraint("category IN ('move', 'scan', 'mark', 'alarm', 'answer')",
                           name='ck_piece_entry_category'),
        sa.PrimaryKeyConstraint('id', name='pk_piece_entry'),
        schema=schema,
    )
    op.create_index('ix_piece_entry_job_id', 'piece_entry', ['job_id', 'id'], schema=schema)


def _line_of(conn, schema: str) -> str | None:
    """The line whose tables ``schema`` holds (its generated serials name it)."""
    if conn.execute(sa.text("SELECT to_regclass('public.plant_line')")).scalar() is not None:
        line_id = conn.execute(sa.text("SELECT id FROM public.plant_line WHERE schema_name = :s"),
                               {"s": schema}).scalar()
        if line_id is not None:
            return line_id
    if schema != PUBLIC:
        return None
    try:  # a one-line database not registered yet: its line is the configured layout's
        from shared.config import load_settings
        from shared.layout import load_layout

        return load_layout(load_settings().line_file).id
    except Exception:  # noqa: BLE001 - no readable layout here: serials without the line
        return None


def upgrade() -> None:
    conn = op.get_bind()
    schemas = add_line_tables(conn, _create, ("piece_step", "piece_entry"))
    for schema in schemas:
        line_id = _line_of(conn, schema)
        conn.execute(sa.text(f"SET LOCAL search_path TO {quote(schema)}, public"))
        try:
            count = rebuild_from_log(conn, line_id)
        finally:
            conn.execute(sa.text("SET LOCAL search_path TO DEFAULT"))
        message = count.as_text(line_id)
        log.warning(message) if count.not_rebuilt else log.info(message)
        if count.finished:  # said on the terminal too, beside (not inside) a command's answer
            print(f"piece records: {message}", file=sys.stderr, flush=True)


def downgrade() -> None:
    conn = op.get_bind()
    for schema in line_schemas(conn):
        for table in TABLES:
            op.drop_table(table, schema=schema)
        op.drop_column('job', 'serial', schema=schema)
