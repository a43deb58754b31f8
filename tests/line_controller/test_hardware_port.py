"""The line_controller's hardware port: a request it gave up on (the hardware
service was away past the timeout, so the task failed) must never run when
the service comes back — it expires in the broker."""

import eventlet
from nameko.rpc import rpc

from services.line_controller.dependencies import NamekoHardwarePort
from services.line_controller.hardware_port import HardwareRequest
from shared import events as ev
from tests.support.waiting import wait_for


class StandInHardware:
    name = ev.HARDWARE
    served: list[str] = []

    @rpc
    def dock_to_buffer(self, correlation_id, slot_no, job_id=None):
        StandInHardware.served.append(correlation_id)
        return {"accepted": True, "actionId": len(StandInHardware.served), "instanceId": "stand-in"}


class RecordingLoop:
    def __init__(self):
        self.refused = []

    def refuse(self, req, code, message):
        self.refused.append((req.task_id, code))


def _request(task_id):
    return HardwareRequest("dock_to_buffer", task_id, ev.ROBOT_ACTION_FAILED, {"slot_no": 1})


def test_a_request_given_up_on_never_runs_when_the_hardware_returns(container_factory, nameko_config):
    StandInHardware.served = []
    first = container_factory(StandInHardware, nameko_config)
    first.start()
    first.stop()  # its request queue stays; nobody consumes it now
    loop = RecordingLoop()
    port = NamekoHardwarePort(nameko_config, loop, timeout=1.0)
    port.retry_pauses = (0.1,)  # asked twice, then given up on
    port._call(_request(7))  # the hardware is away: the waits run out
    assert loop.refused == [(7, "CONNECTION_REFUSED")]

    port.close()

    container_factory(StandInHardware, nameko_config).start()
    port = NamekoHardwarePort(nameko_config, loop, timeout=20.0)
    try:
        port._call(_request(8))  # FIFO: had 7 survived, it would have been served first
    finally:
        port.close()
    assert StandInHardware.served == ["8"]
    assert port.accepted == {"8": "stand-in"} and loop.refused == [(7, "CONNECTION_REFUSED")]


def test_hardware_requests_reuse_their_clients(container_factory, nameko_config):
    # A client per request was a new transport connection, reply queue and consumer
    # for every hardware action (on pgsql:// a database session each).
    StandInHardware.served = []
    container_factory(StandInHardware, nameko_config).start()
    loop = RecordingLoop()
    port = NamekoHardwarePort(nameko_config, loop, timeout=20.0, clients=2)
    try:
        for task_id in range(10):
            port._call(_request(task_id))
        assert StandInHardware.served == [str(n) for n in range(10)] and loop.refused == []
        assert len(port.clients._all) == 1  # one client served them all, in turn
    finally:
        port.close()
    assert port.clients._all == []


def _end_every_other_session(db_url):
    """What a PostgreSQL restart does to this database's clients: every session but
    this one ends (the stand-in's consumer, the port's pooled clients, the listener)."""
    import psycopg2

    with psycopg2.connect(db_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    conn.close()


def _answer(db_url, query, queue):
    """A yes/no query about a transport queue, on a connection of its own."""
    import psycopg2

    with psycopg2.connect(db_url) as conn, conn.cursor() as cur:
        cur.execute(query, (queue,))
        yes = cur.fetchone()[0]
    conn.close()
    return yes


def _wait_for_empty_queue(db_url, queue, timeout=15.0):
    wait_for(lambda: _answer(db_url, "SELECT count(*) = 0 FROM mq_message WHERE queue = %s", queue),
             timeout, 0.05, f"{queue} holding no message")


def _wait_for_consumer(db_url, queue, timeout=15.0):
    wait_for(lambda: _answer(db_url, "SELECT count(*) > 0 FROM mq_consumer c JOIN pg_stat_activity a"
                                     " ON a.pid = c.backend_pid AND a.backend_start = c.backend_started"
                                     " WHERE c.queue = %s", queue),
             timeout, 0.05, f"somebody consuming {queue} again")


def test_a_pooled_client_whose_sessions_died_is_replaced_before_a_request(
        container_factory, nameko_config, db_url):
    # The crash soak's regression: after a PostgreSQL restart a pooled client kept its
    # dead sessions, its next request was published and then failed waiting for the
    # reply (CONNECTION_REFUSED for an action the hardware ran). A lent client is now
    # checked first, as SQLAlchemy's pool_pre_ping does.
    StandInHardware.served = []
    container_factory(StandInHardware, nameko_config).start()
    loop = RecordingLoop()
    port = NamekoHardwarePort(nameko_config, loop, timeout=20.0, clients=1)
    try:
        port._call(_request(1))
        # The reply comes before the stand-in's ack commits; a session ended in between
        # would have the request delivered again (at least once, as the transport
        # promises; the real hardware answers a repeat from its record).
        _wait_for_empty_queue(db_url, f"rpc-{ev.HARDWARE}")
        _end_every_other_session(db_url)
        _wait_for_consumer(db_url, f"rpc-{ev.HARDWARE}")
        port._call(_request(2))
        port._call(_request(3))
    finally:
        port.close()
    assert loop.refused == []
    assert StandInHardware.served == ["1", "2", "3"]


class SlowFirstAnswer:
    """Answers the first request too late (the reply is lost to its caller, as in a
    failover of the transport's database), then at once; runs each id once."""
    name = ev.HARDWARE
    asked: list[str] = []

    @rpc
    def dock_to_buffer(self, correlation_id, slot_no, job_id=None):
        SlowFirstAnswer.asked.append(correlation_id)
        if len(SlowFirstAnswer.asked) == 1:
            eventlet.sleep(1.5)
        return {"accepted": True, "actionId": 1, "instanceId": "stand-in",
                "repeated": len(SlowFirstAnswer.asked) > 1}


def test_a_request_whose_answer_was_lost_is_asked_again_not_refused(container_factory, nameko_config):
    SlowFirstAnswer.asked = []
    container_factory(SlowFirstAnswer, nameko_config).start()
    loop = RecordingLoop()
    port = NamekoHardwarePort(nameko_config, loop, timeout=1.0)
    port.retry_pauses = (0.1, 0.1)
    try:
        port._call(_request(9))
    finally:
        port.close()
    assert loop.refused == []  # refusing would put back a job the robot may be moving
    assert SlowFirstAnswer.asked == ["9", "9"] and port.accepted == {"9": "stand-in"}


class GatedHardware:
    """Accepts a request once the test opens the gate."""
    name = ev.HARDWARE
    gate = eventlet.Event()

    @rpc
    def dock_to_buffer(self, correlation_id, slot_no, job_id=None):
        GatedHardware.gate.wait()
        return {"accepted": True, "actionId": 1, "instanceId": "stand-in"}


def test_a_request_is_being_sent_until_the_hardware_accepts_it(container_factory, nameko_config):
    # What the loop's check after a database outage waits for (tests/line_controller/test_recovery.py).
    GatedHardware.gate = eventlet.Event()
    container_factory(GatedHardware, nameko_config).start()
    port = NamekoHardwarePort(nameko_config, RecordingLoop(), timeout=20.0)
    try:
        port.request(_request(5))
        assert port.sending() == {"5"}
        GatedHardware.gate.send()
        wait_for(lambda: not port.sending(), 20, message="the request accepted")
        assert port.accepted == {"5": "stand-in"}
    finally:
        port.close()


def test_a_request_staged_in_the_loops_transaction_goes_out_with_its_commit(container_factory, nameko_config, db_url):
    """On pgsql:// to the loop's database a request is published in the loop's
    transaction (issue 55: no publish and flush commits of its own): nothing runs
    if that transaction rolls back; once it commits, the request's row is the
    transaction's own and its reply is awaited as a sent one's."""
    import psycopg2

    from shared.transport.pgsql.outbox import Outbox, publishing_in

    StandInHardware.served = []
    container_factory(StandInHardware, nameko_config).start()
    loop = RecordingLoop()
    port = NamekoHardwarePort(nameko_config, loop, timeout=20.0, clients=1)
    caller = psycopg2.connect(db_url)
    try:
        with publishing_in(Outbox(caller)):
            staged = port.stage(_request(1))
        caller.rollback()
        port.discard(staged)  # its client is free again: the next stage gets it at once

        outbox = Outbox(caller)
        with caller.cursor() as cur:
            cur.execute("SELECT txid_current() % 4294967296")
            (txid,) = cur.fetchone()
            with publishing_in(outbox):
                staged = port.stage(_request(2))
            assert staged is not None
            cur.execute("SELECT xmin::text::bigint FROM mq_message WHERE queue = %s", (f"rpc-{ev.HARDWARE}",))
            assert cur.fetchall() == [(txid,)]
        caller.commit()
        with caller.cursor() as cur:
            cur.execute(*outbox.wake())
        caller.commit()
        port.sent(staged)
        wait_for(lambda: port.accepted.get("2") == "stand-in", timeout=20)
        assert StandInHardware.served == ["2"] and loop.refused == [] and port.sending() == set()
    finally:
        caller.close()
        port.close()
