"""Short-hand actions for scripted scheduling rounds: each returns a function of
the round's ``SystemState`` that builds the scheduler's action (it fills in
the buffer slots and loaded jobs the snapshot knows)."""

from services.line_controller import scheduler as s


def Refill(job_id, buffer_slot):  # noqa: N802 - reads like the action it builds
    return lambda state: s.Refill((s.RefillAssignment(job_id, buffer_slot),))


def Load(job_id, equipment_id, slot_no):  # noqa: N802
    return lambda state: s.Load(job_id, state.jobs_by_id[job_id].temp_slot_no, equipment_id, slot_no)


def Unload(job_id, equipment_id, slot_no):  # noqa: N802
    return lambda state: s.Unload(job_id, equipment_id, slot_no, state.jobs_by_id[job_id].temp_slot_no)


def Swap(unload_job_id, load_job_id, equipment_id, slot_no):  # noqa: N802
    return lambda state: s.Swap(Unload(unload_job_id, equipment_id, slot_no)(state),
                                Load(load_job_id, equipment_id, slot_no)(state))


def Scan(job_id):  # noqa: N802
    return lambda state: s.Scan(job_id, state.jobs_by_id[job_id].temp_slot_no)


def Mark(job_id):  # noqa: N802
    return lambda state: s.Mark(job_id, state.jobs_by_id[job_id].temp_slot_no)


def StartMachine(equipment_id):  # noqa: N802
    """Start every loaded, not yet started slot of the machine."""
    def build(state):
        eq = state.equipment_by_id[equipment_id]
        return s.StartMachine(equipment_id, tuple(
            (sl.slot_no, sl.current_job_id) for sl in eq.slots
            if sl.status == "OCCUPIED" and state.jobs_by_id[sl.current_job_id].status == "QUEUED"))
    return build
