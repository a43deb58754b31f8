"""The status vocabularies: the spec's, listed here once and checked by CHECK
constraints so that no writer can invent a status."""

WORK_ORDER_STATUSES = ("CREATED", "RUNNING", "PAUSED", "COMPLETED", "CANCELLED")
WORK_ORDER_TERMINAL = ("COMPLETED", "CANCELLED")
JOB_STATUSES = (
    "PENDING", "QUEUED", "MOVING", "PROCESSING", "WAITING_UNLOAD", "PAUSED",
    "SUSPENDED", "ERROR", "COMPLETED", "SCRAPPED", "CANCELLED",
)
JOB_TERMINAL = ("COMPLETED", "SCRAPPED", "CANCELLED")
# Held for an operator: ``held_status`` keeps the status the job returns to.
JOB_HELD = ("PAUSED", "SUSPENDED")
JOB_LIVE = tuple(s for s in JOB_STATUSES if s not in JOB_TERMINAL)
POSITION_TYPES = ("ON_DOCK", "ON_ROBOT", "ON_BUFFER", "ON_EQUIPMENT", "OUT")
TASK_STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
TASK_TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
SLOT_STATUSES = ("EMPTY", "OCCUPIED", "DONE")
EQUIPMENT_STATUSES = ("IDLE", "RUNNING", "FAULT", "OFFLINE")
ALARM_SEVERITIES = ("INFO", "WARNING", "ERROR", "CRITICAL")
ALARM_STATUSES = ("RAISED", "ACKNOWLEDGED", "SHELVED", "CLEARED")
ALARM_ACTIVE = ("RAISED", "ACKNOWLEDGED")  # what the active list shows; SHELVED is hidden
# A machine's state as /api/stats/timeline draws it (docs/stats.md: how it is derived).
MACHINE_STATES = ("PROCESSING", "IDLE", "WAITING_UNLOAD", "FAULT")
MANUAL_ACTION_STATUSES = ("OPEN", "RESOLVED")
# What a piece's history records beside its steps (``piece_entry``).
PIECE_ENTRY_CATEGORIES = ("move", "scan", "mark", "alarm", "answer")
LOOP_MESSAGE_STATUSES = ("QUEUED", "HANDLED", "REJECTED", "DUPLICATE", "STALE", "FAILED")

AI_JOB_TYPES = (
    "learning_state_analysis", "weak_point_analysis", "next_action_planning",
    "quiz_generation", "flashcard_generation",
)
AI_JOB_STATUSES = ("pending", "locked", "running", "succeeded", "failed", "cancelled", "expired")
AI_TARGET_TYPES = ("user", "material", "knowledge_point")
AI_API_KEY_MODES = ("platform_key", "user_deepseek_key")

