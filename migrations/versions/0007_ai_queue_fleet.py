"""Revision 0007 (after 0006): the AI poll's "offered to" hint on ai_runtime_job.

Two nullable columns, no default and no index: adding them rewrites nothing
and takes a brief ACCESS EXCLUSIVE lock only.
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'


def upgrade() -> None:
    op.add_column('ai_runtime_job', sa.Column('offered_to', sa.String(length=200), nullable=True))
    op.add_column('ai_runtime_job', sa.Column('offered_until', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column('ai_runtime_job', 'offered_until')
    op.drop_column('ai_runtime_job', 'offered_to')
