"""Revision 0005 (after 0004): machine states, cycles, alarm shelving, history indexes."""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0005'
down_revision = '0004'

_OLD_ALARM = "status IN ('RAISED', 'ACKNOWLEDGED', 'CLEARED')"
_NEW_ALARM = "status IN ('RAISED', 'ACKNOWLEDGED', 'SHELVED', 'CLEARED')"
_MACHINE_STATES = "state IN ('PROCESSING', 'IDLE', 'WAITING_UNLOAD', 'FAULT')"


# Indexes on tables the running line writes, built without blocking its writes
# (CREATE INDEX CONCURRENTLY, outside a transaction): name, table, columns, options.
# Indexes of the tables this revision creates are built with them: nothing uses those yet.
ONLINE_INDEXES = (
    ('ix_alarm_raised_at', 'alarm', ['raised_at'], {}),
    ('ix_job_finished_at', 'job', ['finished_at'],
     {'postgresql_where': sa.text('finished_at IS NOT NULL')}),
    # A batch task names its first job in job_id and every job in params.jobIds.
    ('ix_task_job_ids', 'task', [sa.text("(params -> 'jobIds')")], {'postgresql_using': 'gin'}),
    ('ix_ai_runtime_job_finished_at', 'ai_runtime_job', ['finished_at'],
     {'postgresql_where': sa.text('finished_at IS NOT NULL')}),
    ('ix_ai_runtime_job_retried_from_job_id', 'ai_runtime_job', ['retried_from_job_id'],
     {'postgresql_where': sa.text('retried_from_job_id IS NOT NULL')}),
)


def _build_online_indexes() -> None:
    """First in this revision, so a failure here leaves nothing else of it done (the
    autocommit block commits what ran before: the earlier revisions). A build that
    failed leaves an invalid index of its name behind: dropped and built again."""
    with op.get_context().autocommit_block():
        for name, table, columns, options in ONLINE_INDEXES:
            op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)
            op.create_index(name, table, columns, postgresql_concurrently=True, **options)


def upgrade() -> None:
    _build_online_indexes()
    op.create_table(
        'machine_state_interval',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column('equipment_id', sa.String(length=64), nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(_MACHINE_STATES, name=op.f('ck_machine_state_interval_state')),
        sa.ForeignKeyConstraint(['equipment_id'], ['equipment.id'],
                                name=op.f('fk_machine_state_interval_equipment_id_equipment')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_machine_state_interval')),
    )
    op.create_index('ix_machine_state_interval_equipment_id', 'machine_state_interval',
                    ['equipment_id', 'started_at'])
    op.create_index('ix_machine_state_interval_open', 'machine_state_interval', ['equipment_id'],
                    unique=True, postgresql_where=sa.text('ended_at IS NULL'))
    op.create_table(
        'machine_cycle',
        sa.Column('id', sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column('equipment_id', sa.String(length=64), nullable=False),
        sa.Column('job_ids', postgresql.ARRAY(sa.BigInteger()), nullable=False),
        sa.Column('requested_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('aborted', sa.Boolean(), server_default='false', nullable=False),
        # Its pieces that have finished since, by outcome (quality), counted in by the loop.
        sa.Column('good_pieces', sa.Integer(), server_default='0', nullable=False),
        sa.Column('scrapped_pieces', sa.Integer(), server_default='0', nullable=False),
        sa.ForeignKeyConstraint(['equipment_id'], ['equipment.id'],
                                name=op.f('fk_machine_cycle_equipment_id_equipment')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_machine_cycle')),
    )
    op.create_index('ix_machine_cycle_equipment_id', 'machine_cycle', ['equipment_id', 'ended_at'])
    op.create_index('ix_machine_cycle_open', 'machine_cycle', ['equipment_id'],
                    postgresql_where=sa.text('ended_at IS NULL'))
    op.create_index('ix_machine_cycle_job_ids', 'machine_cycle', ['job_ids'], postgresql_using='gin')

    op.drop_constraint(op.f('ck_alarm_status'), 'alarm', type_='check')
    op.create_check_constraint(op.f('ck_alarm_status'), 'alarm', _NEW_ALARM)
    op.add_column('alarm', sa.Column('shelved_until', sa.DateTime(timezone=True), nullable=True))
    op.add_column('alarm', sa.Column('shelve_reason', sa.String(length=200), nullable=True))
    op.add_column('alarm', sa.Column('shelved_by', sa.String(length=200), nullable=True))
    op.add_column('alarm', sa.Column('shelved_at', sa.DateTime(timezone=True), nullable=True))
    # The status an alarm returns to when its shelf time is up (RAISED or ACKNOWLEDGED).
    op.add_column('alarm', sa.Column('status_before_shelve', sa.String(length=16), nullable=True))
    # In the transaction: it holds alarm's exclusive lock already (the new columns, the
    # re-checked status constraint), and no row is SHELVED yet (docs/operations.md, "Upgrades").
    op.create_index('ix_alarm_shelved_until', 'alarm', ['shelved_until'],
                    postgresql_where=sa.text("status = 'SHELVED'"))


def downgrade() -> None:
    op.drop_index('ix_ai_runtime_job_retried_from_job_id', table_name='ai_runtime_job')
    op.drop_index('ix_ai_runtime_job_finished_at', table_name='ai_runtime_job')
    op.drop_index('ix_task_job_ids', table_name='task')
    op.drop_index('ix_job_finished_at', table_name='job')
    op.drop_index('ix_alarm_shelved_until', table_name='alarm')
    op.drop_index('ix_alarm_raised_at', table_name='alarm')
    for column in ('status_before_shelve', 'shelved_at', 'shelved_by', 'shelve_reason',
                   'shelved_until'):
        op.drop_column('alarm', column)
    op.execute("UPDATE alarm SET status = 'RAISED' WHERE status = 'SHELVED'")
    op.drop_constraint(op.f('ck_alarm_status'), 'alarm', type_='check')
    op.create_check_constraint(op.f('ck_alarm_status'), 'alarm', _OLD_ALARM)
    op.drop_table('machine_cycle')
    op.drop_table('machine_state_interval')
