"""Revision 0003 (after 0002): the dock, its pieces waiting, so a refill never asks for more."""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'


def upgrade() -> None:
    op.create_table('dock',
    sa.Column('id', sa.SmallInteger(), server_default='1', nullable=False),
    sa.Column('pieces_waiting', sa.Integer(), nullable=True),
    sa.Column('observed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.CheckConstraint('id = 1', name=op.f('ck_dock_single_row')),
    sa.CheckConstraint('pieces_waiting >= 0', name=op.f('ck_dock_pieces_not_negative')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dock'))
    )
    # The one row exists from the start: the loop only ever UPDATEs it.
    op.execute("INSERT INTO dock (id) VALUES (1)")


def downgrade() -> None:
    op.drop_table('dock')
