"""Revision 0006 (after 0005): the facts that fill an alarm's and a manual action's text.

The API keeps the English ``message``/``text``; ``facts`` (job, slot, machine,
error code, …) let the page render the same sentence from its own catalog, in
the reader's language (issue 27). Rows from before have none: the page falls
back to the English text for them.
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0006'
down_revision = '0005'


def upgrade() -> None:
    for table in ('alarm', 'manual_action'):
        op.add_column(table, sa.Column('facts', postgresql.JSONB(astext_type=sa.Text()),
                                       server_default=sa.text("'{}'::jsonb"), nullable=False))


def downgrade() -> None:
    for table in ('alarm', 'manual_action'):
        op.drop_column(table, 'facts')
