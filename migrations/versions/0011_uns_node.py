"""Revision 0011 (after 0010): the northbound publisher's table (issue 52).

``uns_node``: per line, the event-log seq the MQTT broker acknowledged, the
Sparkplug bdSeq of the node's last connect, and what the gateway shows of the
publisher (``GET /api/plant/uns``, ``/metrics``). A new table; nothing existing
is locked. Its grants are ``shared.db.roles``' (``uns_``: the gateway's role
reads and writes it; the publisher runs as that role)."""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'


def upgrade() -> None:
    op.create_table(
        'uns_node',
        sa.Column('line_id', sa.String(32), nullable=False),
        sa.Column('schema_name', sa.String(63), nullable=False),
        sa.Column('acked_seq', sa.BigInteger(), nullable=False),
        sa.Column('bd_seq', sa.Integer(), server_default='0', nullable=False),
        sa.Column('connected', sa.Boolean(), server_default='false', nullable=False),
        sa.Column('messages', sa.BigInteger(), server_default='0', nullable=False),
        sa.Column('purged_unpublished', sa.BigInteger(), server_default='0', nullable=False),
        sa.Column('publisher', sa.String(200), nullable=True),
        sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.PrimaryKeyConstraint('line_id', name=op.f('pk_uns_node')),
    )


def downgrade() -> None:
    op.drop_table('uns_node')
