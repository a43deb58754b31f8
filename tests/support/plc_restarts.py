"""A simulated PLC that restarts right after it takes a command: the
acknowledgement window of docs/state-machines.md ("How each protocol closes the
acknowledgement window"), hit on purpose, on either protocol's simulator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.hardware import plc as P


def restart_once_accepted(simulator, model_method: str, ack_address: Callable[..., int], delay: float,
                          down: float, when: Callable[..., bool] = lambda *args: True) -> list[int]:
    """The simulator restarts (down for ``down`` s) ``delay`` s after the next
    command its model's ``model_method`` acknowledges for which ``when(*args)`` is
    true: on the server's loop, as the command is taken. Returns the list the
    acknowledged id goes in."""
    model = simulator.model
    original = getattr(model, model_method)
    accepted: list[int] = []

    def take(*args):
        before = model.mem[ack_address(*args)]
        original(*args)
        after = model.mem[ack_address(*args)]
        if after != before and not accepted and when(*args):
            accepted.append(after)
            restart = lambda: asyncio.ensure_future(simulator._restart(down))  # noqa: E731
            asyncio.get_running_loop().call_later(delay, restart)

    setattr(model, model_method, take)
    return accepted


def after_robot_command(simulator, delay: float, down: float, command: int | None = None) -> list[int]:
    """After the next robot command taken (of code ``command``, any if None)."""
    robot = simulator.model.map.robot_base
    return restart_once_accepted(
        simulator, "_robot_command", lambda: robot + P.R_ACK_ID, delay, down,
        lambda: command is None or simulator.model.mem[robot + P.R_CMD_CODE] == command)


def after_machine_start(simulator, delay: float, down: float) -> list[int]:
    """After the next machine start taken (of any machine)."""
    return restart_once_accepted(simulator, "_machine_start", lambda e: e.base + P.M_ACK_ID, delay, down)
