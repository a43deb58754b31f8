"""Revision 0013 (after 0012): shifts, downtime and OEE (issue 53; PRODUCT.md,
"Shifts, downtime and OEE"; docs/oee.md).

In every line's schema (``shared.db.lines.line_schemas``): ``line_state_interval``
(the line's RUNNING / IDLE / DOWN stretches, the loop's, a DOWN one a stop with
its cause and the operator's reason) and ``planned_downtime``. New tables only:
nothing existing is rewritten. A line's history of states begins when its loop
first runs at this revision."""
import sqlalchemy as sa
from alembic import op

from shared.db.lines import add_line_tables, line_schemas

revision = '0013'
down_revision = '0012'

TABLES = ("line_state_interval", "planned_downtime")


def _create(schema: str) -> None:
    op.create_table(
        'line_state_interval',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column('state', sa.String(16), nullable=False),
        sa.Column('cause', sa.String(32), nullable=True),
        sa.Column('equipment_id', sa.String(64), nullable=True),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('seen_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('reason_code', sa.String(64), nullable=True),
        sa.Column('comment', sa.Text(), nullable=True),
        sa.Column('assigned_by', sa.String(200), nullable=True),
        sa.Column('assigned_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('split_from', sa.BigInteger(), nullable=True),
        sa.CheckConstraint("state IN ('RUNNING', 'IDLE', 'DOWN')", name='ck_line_state_interval_state'),
        sa.PrimaryKeyConstraint('id', name='pk_line_state_interval'),
        schema=schema,
    )
    op.create_index('ix_line_state_interval_started_at', 'line_state_interval', ['started_at'], schema=schema)
    op.create_index('ix_line_state_interval_open', 'line_state_interval', [sa.text('(ended_at IS NULL)')],
                    unique=True, schema=schema, postgresql_where=sa.text('ended_at IS NULL'))
    op.create_table(
        'planned_downtime',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('ended_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('reason', sa.String(200), nullable=False),
        sa.Column('created_by', sa.String(200), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.CheckConstraint('ended_at > started_at', name='ck_planned_downtime_window'),
        sa.PrimaryKeyConstraint('id', name='pk_planned_downtime'),
        schema=schema,
    )
    op.create_index('ix_planned_downtime_started_at', 'planned_downtime', ['started_at'], schema=schema)


def upgrade() -> None:
    conn = op.get_bind()
    add_line_tables(conn, _create, TABLES)


def downgrade() -> None:
    conn = op.get_bind()
    for schema in line_schemas(conn):
        for table in TABLES:
            op.drop_table(table, schema=schema)
