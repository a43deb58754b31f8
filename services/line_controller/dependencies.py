"""nameko DependencyProviders of the line_controller: the loop (one per
container, started with it) and the ``line_events`` publisher it uses."""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import uuid

import eventlet
from nameko.events import EventDispatcher
from nameko.exceptions import RemoteError, UnknownService
from nameko.extensions import DependencyProvider
from nameko.standalone.rpc import ClusterRpcProxy

from shared import events as ev
from shared.config import load_settings
from shared.db.engine import make_engine
from shared.db.lines import line_placement
from shared.layout import load_layout
from shared.rpc import RpcClientPool
from shared.transport.pgsql.outbox import same_database

from .hardware_port import HardwareRequest
from .loop import EventLoop
from .messages import EventLoopMessage, new_message
from .outcome import Outcome, Pending
from .scheduler import default_scheduler

log = logging.getLogger(__name__)

# After a request found no answer, it is sent again after these pauses (s); then refused.
SEND_RETRY_PAUSES = (0.5, 1.0, 2.0, 4.0)

PLC_STATE_TIMEOUT = 3.0  # seconds one plc_state() call of the start-up recovery may take
PLC_WAIT_SECONDS = 20.0  # how long recovery keeps asking when the PLC is not reachable yet
ACCEPTED_REMEMBERED = 10_000  # acceptances kept: far more than are ever open at once
HARDWARE_CLIENTS = 4  # RPC clients for hardware requests: the robot, a tool and machine starts at once
# A step's deadline (task.deadline_at); past it a StepTimeout suspends the job:
# LINECTL_STEP_TIMEOUT_SECONDS (default 150 s, above the hardware's own 120 s action
# timeout, so its Failed result comes first); the nameko config key
# LINECTL_STEP_TIMEOUT overrides it per container (tests).


class LineEventPublisher(EventDispatcher):
    """Publishes each committed loop transaction as one ``line_events`` event."""

    def publish_frames(self, tx_id: int, frames: list[dict]) -> None:
        self.publisher.publish({"txId": tx_id, "events": frames}, exchange=self.exchange,
                               routing_key=ev.LINE_EVENTS)


class NamekoHardwarePort:
    """Sends a hardware RPC in its own green thread: the loop never waits for it.
    A refusal (or no answer) comes back to the loop as a ``*Failed`` result.
    The calls borrow started clients from a pool: a client per call was a new
    transport connection, reply queue and consumer for every hardware action."""

    def __init__(self, config: dict, loop: EventLoop, timeout: float = 10.0, instance_id: str | None = None,
                 clients: int = HARDWARE_CLIENTS, hardware_service: str = ev.HARDWARE):
        self.config = config
        self.loop = loop
        self.hardware_service = hardware_service  # this line's
        self.timeout = timeout
        # task id -> the hardware instance that accepted it (the latest ones): after a
        # hardware restart only what an earlier instance accepted may have started.
        self.accepted: collections.OrderedDict[str, str] = collections.OrderedDict()
        # Every request names this instance; see LineHardware.fence.
        self.context = {ev.CONTROLLER_CONTEXT_KEY: instance_id} if instance_id else None
        # Expiring: a request given up on here (refused below) never runs later.
        self.clients = RpcClientPool(config, size=clients, timeout=timeout, context_data=self.context)
        self.retry_pauses = SEND_RETRY_PAUSES
        self._sending: set[str] = set()

    def close(self) -> None:
        self.clients.close()

    def request(self, req: HardwareRequest) -> None:
        self._sending.add(str(req.task_id))
        eventlet.spawn(self._call_once, req)

    def sending(self) -> set[str]:
        return set(self._sending)

    def stage(self, req: HardwareRequest):
        """Publish ``req`` now, in the loop's open transaction (its outbox): it goes
        out when that commits (then :meth:`sent`), or never (:meth:`discard`). None:
        not staged (no client free at once, the service unknown): :meth:`request` it
        after the commit as usual."""
        lent = self.clients.client(wait=0)
        try:
            proxy = lent.__enter__()
        except Exception:  # noqa: BLE001 - every client busy: sent after the commit
            return None
        try:
            reply = getattr(getattr(proxy, self.hardware_service), req.rpc).call_async(str(req.task_id),
                                                                                       **req.kwargs)
        except Exception:  # noqa: BLE001 - e.g. UnknownService: request() refuses it after the commit
            lent.__exit__(None, None, None)
            return None
        return req, lent, reply

    def sent(self, staged) -> None:
        """``staged``'s transaction committed: await its reply in a green thread of its own."""
        req = staged[0]
        self._sending.add(str(req.task_id))
        eventlet.spawn(self._await_staged, staged)

    def discard(self, staged) -> None:
        staged[1].__exit__(None, None, None)

    def _await_staged(self, staged) -> None:
        req, lent, reply = staged
        try:
            try:
                answer = reply.result()
            except BaseException as exc:
                try:
                    lent.__exit__(type(exc), exc, exc.__traceback__)  # the pool keeps or drops the client
                except BaseException:  # noqa: BLE001, S110 - re-raised by the pool: handled below
                    pass
                raise
            lent.__exit__(None, None, None)
        except (RemoteError, UnknownService) as exc:
            log.warning("hardware %s for task %s failed: %s", req.rpc, req.task_id, exc)
            self.loop.refuse(req, "CONNECTION_REFUSED", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - no answer: asked again, as request() does
            log.info("hardware %s for task %s: no answer (%s), asking again", req.rpc, req.task_id,
                     type(exc).__name__)
            self._call(req)
        else:
            self._answered(req, answer)
        finally:
            self._sending.discard(str(req.task_id))

    def _call_once(self, req: HardwareRequest) -> None:
        try:
            self._call(req)
        finally:
            self._sending.discard(str(req.task_id))

    def _call(self, req: HardwareRequest) -> None:
        for attempt, pause in enumerate((*self.retry_pauses, None), start=1):
            try:
                with self.clients.client() as proxy:
                    reply = getattr(getattr(proxy, self.hardware_service), req.rpc)(str(req.task_id), **req.kwargs)
                break
            except (RemoteError, UnknownService) as exc:  # refused by the service, or none runs
                failure = exc
                pause = None
            except Exception as exc:  # no hardware service, RPC timeout, transport down, all clients busy
                # The request may have reached the hardware and only its answer been
                # lost (the transport's database failing over): asked again with the
                # same task id, the hardware runs it once and says it has it.
                failure = exc
            if pause is None:
                log.warning("hardware %s for task %s failed: %s", req.rpc, req.task_id, failure)
                self.loop.refuse(req, "CONNECTION_REFUSED", f"{type(failure).__name__}: {failure}")
                return
            log.info("hardware %s for task %s: no answer (%s), asking again (%s)",
                     req.rpc, req.task_id, type(failure).__name__, attempt)
            eventlet.sleep(pause)
        self._answered(req, reply)

    def _answered(self, req: HardwareRequest, reply) -> None:
        if not (reply or {}).get("accepted"):
            self.loop.refuse(req, (reply or {}).get("errorCode", "REJECTED"),
                             (reply or {}).get("errorMessage", "not accepted"))
            return
        self.note_accepted([str(req.task_id)], str(reply.get("instanceId") or ""))

    def note_accepted(self, task_ids, instance_id: str) -> None:
        for task_id in task_ids:
            self.accepted[task_id] = instance_id
            self.accepted.move_to_end(task_id)
        while len(self.accepted) > ACCEPTED_REMEMBERED:
            self.accepted.popitem(last=False)

    def accepted_by_other_than(self, instance_id: str) -> list[str]:
        return [t for t, inst in self.accepted.items() if inst != instance_id]


class LoopHandle:
    """What an entrypoint may ask of the loop, and nothing more: persist and enqueue
    a message (then wait on its :class:`Pending`), the loop's status, whether its
    inbox is empty, and a hardware event's message (its id stable across redelivery)."""

    def __init__(self, loop: EventLoop, worker_ctx, command_wait_seconds: float):
        self._loop = loop
        self.worker_ctx = worker_ctx
        # How long a command waits for its outcome by default (read once, at setup).
        self.command_wait_seconds = command_wait_seconds

    def persist(self, msg: EventLoopMessage) -> Outcome | None:
        return self._loop.persist(msg)

    def submit(self, msg: EventLoopMessage) -> Pending:
        return self._loop.submit(msg)

    def status(self) -> dict:
        return self._loop.status()

    def inbox_empty(self) -> bool:
        return self._loop.inbox.qsize() == 0

    def tick_due(self) -> bool:
        return self._loop.tick_due()

    def accepted_by_other_than(self, instance_id: str) -> list[str]:
        """The tasks a hardware instance other than ``instance_id`` accepted."""
        return self._loop.hardware.accepted_by_other_than(instance_id)

    def event_message_id(self, type_: str, payload: dict) -> str:
        if payload.get("eventId"):
            return str(payload["eventId"])[:64]
        if type_ in ev.WORKER_RESULTS:  # exactly one result per accepted action
            return f"{type_}:{payload.get('correlationId')}:{payload.get('actionId')}"[:64]
        # A redelivered event keeps its headers (the dispatching call id) and payload.
        basis = json.dumps([type_, self.worker_ctx.immediate_parent_call_id, payload], sort_keys=True)
        return hashlib.sha1(basis.encode()).hexdigest()

    def event(self, type_: str, payload: dict) -> EventLoopMessage:
        correlation = payload.get("correlationId") if isinstance(payload, dict) else None
        return new_message(type_, payload if isinstance(payload, dict) else {},
                           id=self.event_message_id(type_, payload if isinstance(payload, dict) else {}),
                           correlation_id=None if correlation is None else str(correlation),
                           actor=ev.HARDWARE)


class ProductionLoop(DependencyProvider):
    """Owns the one event loop of the service (``LINECTL_DATABASE_URL`` from the
    nameko config; layout and waits from ``shared.config``)."""

    def setup(self):
        config = self.container.config
        self.settings = load_settings()
        self.line = ev.LineServices.of_service(self.container.service_name)
        layout = load_layout(config.get("LINECTL_LINE_FILE") or self.settings.line_file)
        # The loop's connections write as its line's role, in its line's schema:
        # PostgreSQL refuses them every other table (shared.db.lines).
        place = line_placement(config["LINECTL_DATABASE_URL"], layout.id, default=self.line.line_id is None)
        role = place.role if config.get("LINECTL_DB_ROLES", True) else None
        self.engine = make_engine(config["LINECTL_DATABASE_URL"], pool_size=3, role=role, schema=place.schema)
        self.loop = EventLoop(self.engine, layout, scheduler=default_scheduler(),
                              action_timeout_seconds=float(config.get(
                                  "LINECTL_STEP_TIMEOUT", self.settings.step_timeout_seconds)),
                              cycle_overdue_factor=self.settings.cycle_overdue_factor)
        # pgsql:// on the loop's own database: the loop's messages go out in its transactions.
        self.loop.uow.outbox = same_database(config.get("AMQP_URI", ""), config["LINECTL_DATABASE_URL"])
        self.loop.uow.outbox_role = role
        self.instance_id = uuid.uuid4().hex
        self.loop.hardware = NamekoHardwarePort(config, self.loop, instance_id=self.instance_id,
                                                hardware_service=self.line.hardware)

    def start(self):
        publisher = next(d for d in self.container.dependencies if isinstance(d, LineEventPublisher))
        self.loop.publish = publisher.publish_frames
        self.loop.start(recover=True, plc_state=self._plc_state, plc_wait=PLC_WAIT_SECONDS)

    def _plc_state(self):
        """The hardware's ``plc_state()`` for the start-up recovery check, with
        ``knownActions``: the actions the hardware still holds or has answered.
        An exception (no hardware service within the timeout) means unknown."""
        context = {ev.CONTROLLER_CONTEXT_KEY: self.instance_id}
        with ClusterRpcProxy(self.container.config, timeout=PLC_STATE_TIMEOUT, context_data=context) as proxy:
            hardware = getattr(proxy, self.line.hardware)
            known = hardware.known_actions()  # also fences out requests of earlier instances
            self.loop.hardware.note_accepted(known.get("open", ()), str(known.get("instanceId") or ""))
            return {**hardware.plc_state(), "knownActions": known}

    def stop(self):
        self.loop.stop()
        close = getattr(self.loop.hardware, "close", None)  # a test's stand-in may have none
        if close is not None:
            close()
        self.engine.dispose()

    def kill(self):
        self.stop()

    def get_dependency(self, worker_ctx):
        return LoopHandle(self.loop, worker_ctx, self.settings.command_wait_seconds)
