"""The line's safety invariants, checked on the final state and by replaying
``event_log`` (job and slot frames carry the whole object, shared/serialize.py)."""

from __future__ import annotations

from sqlalchemy import text

TERMINAL = ("COMPLETED", "SCRAPPED", "CANCELLED")


def replay(engine, buffer_size: int = 8, after: int = 0) -> int:
    """Replay the log transaction by transaction; after each one, no equipment
    slot holds two jobs, no two live jobs share a buffer slot or an equipment
    position, and at most ``buffer_size`` live jobs hold buffer slots.
    ``after``: from the event after that seq, the line clear before it (no live
    job, every slot empty). Returns the number of transactions checked."""
    with engine.connect() as c:
        frames = c.execute(text("SELECT seq, tx_id, type, payload FROM event_log WHERE seq > :after ORDER BY seq"),
                           {"after": after}).fetchall()
    live: dict[int, dict] = {}  # the jobs not (yet) terminal, as last logged
    slots: dict[tuple[str, int], int | None] = {}
    txs = 0
    for i, f in enumerate(frames):
        p = f.payload
        if f.type == "SlotChanged":
            key = (p["equipmentId"], p["slotNo"])
            holder = slots.get(key)
            if p["status"] == "EMPTY":
                slots[key] = None
            else:
                assert holder in (None, p["currentJobId"]), \
                    f"seq {f.seq}: job {p['currentJobId']} into {key} held by job {holder}"
                slots[key] = p["currentJobId"]
        elif f.type.startswith("Job") or f.type == "StepCompleted":
            if p["status"] in TERMINAL:
                live.pop(p["id"], None)
            else:
                live[p["id"]] = p
        if i + 1 == len(frames) or frames[i + 1].tx_id != f.tx_id:
            txs += 1
            buffer = [j["tempSlotNo"] for j in live.values() if j["tempSlotNo"] is not None]
            assert len(buffer) <= buffer_size, f"tx {f.tx_id}: {len(buffer)} pieces on the buffer"
            assert len(buffer) == len(set(buffer)), f"tx {f.tx_id}: two jobs on one buffer slot"
            places = [j["positionRefId"] for j in live.values() if j["positionType"] == "ON_EQUIPMENT"]
            assert len(places) == len(set(places)), f"tx {f.tx_id}: two jobs in one equipment slot"
    return txs


def assert_line_clear(engine) -> None:
    """Nothing left anywhere: every slot EMPTY, no live job, no open task."""
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM equipment_slot WHERE status <> 'EMPTY'")).scalar() == 0
        assert c.execute(text(
            "SELECT count(*) FROM job WHERE status NOT IN ('COMPLETED','SCRAPPED','CANCELLED')")).scalar() == 0
        assert c.execute(text(
            "SELECT count(*) FROM job WHERE temp_slot_no IS NOT NULL")).scalar() == 0
        assert c.execute(text("SELECT count(*) FROM task WHERE status IN ('PENDING','RUNNING')")).scalar() == 0
