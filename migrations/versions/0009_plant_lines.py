"""Revision 0009 (after 0008): the plant (issue 38). A table naming where each
line's tables live. The line tables already here stay where they are: they
become the first registered line's (``shared.db.lines.register_lines``), so a
one-line database upgrades with nothing rewritten and its ``seq`` continuing.
A new table and a function; nothing existing is locked.

``next_work_order_number()`` numbers generated order codes from the orders' id
sequence, as the loop did with ``pg_get_serial_sequence('work_order', 'id')``,
which finds no sequence in another line's schema (its copy of ``work_order``
draws on ``public``'s sequence without owning it). Each line's schema has its
own copy of the function (``shared.db.lines``), found through its search_path."""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'


NEXT_WORK_ORDER_NUMBER = """
CREATE OR REPLACE FUNCTION next_work_order_number() RETURNS bigint LANGUAGE sql VOLATILE
AS $$ SELECT nextval(pg_get_serial_sequence('public.work_order', 'id')) $$"""


def upgrade() -> None:
    op.create_table(
        'plant_line',
        sa.Column('id', sa.String(length=32), nullable=False),
        sa.Column('schema_name', sa.String(length=63), nullable=False),
        sa.Column('role_name', sa.String(length=63), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_plant_line')),
        sa.UniqueConstraint('schema_name', name=op.f('uq_plant_line_schema_name')),
        sa.UniqueConstraint('role_name', name=op.f('uq_plant_line_role_name')),
    )
    op.execute(NEXT_WORK_ORDER_NUMBER)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS next_work_order_number()")
    op.drop_table('plant_line')
