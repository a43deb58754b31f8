"""Revision 0008 (after 0007): people (issue 39): users, sign-in sessions,
failed sign-ins and the access audit. New tables only; nothing existing is
rewritten or locked."""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0008'
down_revision = '0007'

JSON_LIST = dict(type_=postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'[]'::jsonb"),
                 nullable=False)


def _when(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable,
                     server_default=None if nullable else sa.text('now()'))


def upgrade() -> None:
    op.create_table(
        'people_user',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('display_name', sa.String(length=200), server_default='', nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('lines', **JSON_LIST),
        sa.Column('password_hash', sa.Text(), nullable=False),
        sa.Column('disabled', sa.Boolean(), server_default=sa.text('false'), nullable=False),
        _when('created_at'), _when('changed_at'),
        sa.CheckConstraint("role IN ('operator', 'platform', 'runtime', 'admin')",
                           name=op.f('ck_people_user_role')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_people_user')),
        sa.UniqueConstraint('name', name=op.f('uq_people_user_name')),
    )
    op.create_table(
        'people_session',
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('user_name', sa.String(length=64), nullable=False),
        sa.Column('display_name', sa.String(length=200), server_default='', nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('lines', **JSON_LIST),
        sa.Column('source', sa.String(length=8), nullable=False),
        sa.Column('csrf_token', sa.String(length=64), nullable=False),
        _when('created_at'), _when('last_seen_at'),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        _when('ended_at', nullable=True),
        sa.CheckConstraint("source IN ('local', 'ldap')", name=op.f('ck_people_session_source')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_people_session')),
    )
    op.create_index('ix_people_session_user_name', 'people_session', ['user_name'])
    op.create_index('ix_people_session_ended_at', 'people_session', ['ended_at'])
    op.create_table(
        'people_sign_in_failure',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column('user_name', sa.String(length=200), nullable=False),
        _when('at'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_people_sign_in_failure')),
    )
    op.create_index('ix_people_sign_in_failure_user_name', 'people_sign_in_failure', ['user_name', 'at'])
    op.create_table(
        'people_audit',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        _when('at'),
        sa.Column('actor', sa.String(length=200), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=True),
        sa.Column('action', sa.String(length=64), nullable=False),
        sa.Column('target_type', sa.String(length=32), nullable=False),
        sa.Column('target_id', sa.String(length=200), nullable=True),
        sa.Column('line_id', sa.String(length=64), nullable=True),
        sa.Column('outcome', sa.String(length=64), nullable=False),
        sa.Column('source', sa.String(length=64), nullable=True),
        sa.Column('detail', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"),
                  nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_people_audit')),
    )
    op.create_index('ix_people_audit_at', 'people_audit', ['at'])


def downgrade() -> None:
    for table in ('people_audit', 'people_sign_in_failure', 'people_session', 'people_user'):
        op.drop_table(table)
