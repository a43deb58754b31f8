"""SQLAlchemy models of every table. Tables are created by Alembic migrations
only (``migrations/``); ``tests/integration/test_migrations.py`` checks that
these models and the migrations agree.

Three bounded contexts share the database, a module each:

* ``line``: line control (seed 004): work_order, job, equipment, dock,
  equipment_slot, task, alarm, machine_state_interval, machine_cycle,
  manual_action, event_log, loop_message, audit_log. Only the
  line_controller's event loop writes them.
* ``ai``: AI Runtime jobs (seed 000): ai_runtime_job, ai_runtime_result,
  ai_job_transition, ai_snapshot, ai_credential. Only ``services.ai_jobs``
  writes them.
* ``people``: users, sessions, failed sign-ins and the access audit
  (people_*). Only ``services.identity`` writes them.
* ``plant``: plant_line, where each line's tables live (``shared.db.lines``).
* ``uns``: uns_node, the northbound publisher's progress per line (``services.uns``).
* ``transport``: the pgsql:// message transport: mq_exchange, mq_queue,
  mq_binding, mq_consumer, mq_message, mq_dead_letter.

``base`` holds the declarative base, ``vocabularies`` the status vocabularies
(checked by CHECK constraints). Everything is importable from here.
"""

from shared.db.models.ai import (
    AiCredential,
    AiJobTransition,
    AiRuntimeJob,
    AiRuntimeResult,
    AiSnapshot,
)
from shared.db.models.base import NAMING, Base
from shared.db.models.line import (
    Alarm,
    AuditLog,
    Dock,
    Equipment,
    EquipmentSlot,
    EventLog,
    Job,
    LoopMessage,
    MachineCycle,
    MachineStateInterval,
    ManualAction,
    Task,
    WorkOrder,
)
from shared.db.models.line_states import LINE_STATES, LineStateInterval, PlannedDowntime
from shared.db.models.people import (
    SESSION_SOURCES,
    USER_ROLES,
    PeopleAudit,
    PeopleSession,
    PeopleSignInFailure,
    PeopleUser,
)
from shared.db.models.plant import PlantLine
from shared.db.models.transport import (
    MQ_EXCHANGE_TYPES,
    MqBinding,
    MqConsumer,
    MqDeadLetter,
    MqExchange,
    MqMessage,
    MqQueue,
)
from shared.db.models.uns import UnsNode
from shared.db.models.vocabularies import (
    AI_API_KEY_MODES,
    AI_JOB_STATUSES,
    AI_JOB_TYPES,
    AI_TARGET_TYPES,
    ALARM_ACTIVE,
    ALARM_SEVERITIES,
    ALARM_STATUSES,
    EQUIPMENT_STATUSES,
    JOB_HELD,
    JOB_LIVE,
    JOB_STATUSES,
    JOB_TERMINAL,
    LOOP_MESSAGE_STATUSES,
    MACHINE_STATES,
    MANUAL_ACTION_STATUSES,
    POSITION_TYPES,
    SLOT_STATUSES,
    TASK_STATUSES,
    TASK_TERMINAL,
    WORK_ORDER_STATUSES,
    WORK_ORDER_TERMINAL,
)

__all__ = [
    "PeopleAudit", "PeopleSession", "PeopleSignInFailure", "PeopleUser", "SESSION_SOURCES", "USER_ROLES",
    "NAMING", "Base", "AiCredential", "AiJobTransition", "AiRuntimeJob", "AiRuntimeResult",
    "AiSnapshot", "Alarm", "AuditLog", "Dock", "Equipment", "EquipmentSlot", "EventLog", "Job",
    "LoopMessage", "MachineCycle", "MachineStateInterval", "ManualAction", "Task", "WorkOrder",
    "MQ_EXCHANGE_TYPES", "MqBinding", "MqConsumer", "MqDeadLetter", "MqExchange", "MqMessage",
    "MqQueue", "PlantLine", "UnsNode", "WORK_ORDER_STATUSES", "WORK_ORDER_TERMINAL", "JOB_STATUSES", "JOB_TERMINAL",
    "JOB_HELD", "JOB_LIVE",
    "POSITION_TYPES", "TASK_STATUSES", "TASK_TERMINAL", "SLOT_STATUSES", "EQUIPMENT_STATUSES",
    "ALARM_SEVERITIES", "ALARM_STATUSES", "ALARM_ACTIVE", "MACHINE_STATES",
    "MANUAL_ACTION_STATUSES", "LOOP_MESSAGE_STATUSES", "AI_JOB_TYPES", "AI_JOB_STATUSES",
    "AI_TARGET_TYPES", "AI_API_KEY_MODES", "LINE_STATES", "LineStateInterval", "PlannedDowntime",
]
