"""Revision 0004 (after 0003): mq_consumer's listening connection for its direct replies."""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'


def upgrade() -> None:
    # Set once the consumer's process LISTENs for its direct deliveries; NULL:
    # every message to it goes through mq_message.
    op.add_column('mq_consumer', sa.Column('listener_pid', sa.Integer(), nullable=True))
    op.add_column('mq_consumer', sa.Column('listener_started', sa.DateTime(timezone=True),
                                           nullable=True))


def downgrade() -> None:
    op.drop_column('mq_consumer', 'listener_started')
    op.drop_column('mq_consumer', 'listener_pid')
