"""What the simulator's OPC UA server needs of asyncua's ``Server`` that asyncua
has no setting for: one user name and password, a floor under the publishing
interval, a method's arguments described, and a stop that does not wait for
its clock."""

from __future__ import annotations

import asyncio

from asyncua import Server, ua
from asyncua.crypto.permission_rules import User, UserRole


class PasswordUsers:
    """One user name and password (asyncua's UserManager protocol)."""

    def __init__(self, user: str, password: str):
        self.user, self.password = user, password

    def get_user(self, iserver, username=None, password=None, certificate=None):
        if username == self.user and password == self.password:
            return User(role=UserRole.User, name=username)
        return None


def publish_no_faster(server: Server, interval_ms: float) -> None:
    """Revise every CreateSubscription's publishing interval up to ``interval_ms``
    (asyncua grants the requested one and has no setting for a floor)."""
    service = server.iserver.subscription_service
    create = service.create_subscription

    async def create_subscription(params, *args, **kwargs):
        params.RequestedPublishingInterval = max(params.RequestedPublishingInterval, interval_ms)
        return await create(params, *args, **kwargs)

    service.create_subscription = create_subscription


def method_argument(name: str, type_name: str) -> ua.Argument:
    arg = ua.Argument()
    arg.Name = name
    array = type_name.endswith("[]")
    arg.DataType = ua.NodeId(getattr(ua.ObjectIds, type_name.removesuffix("[]")))
    arg.ValueRank = 1 if array else -1
    arg.ArrayDimensions = [0] if array else []
    arg.Description = ua.LocalizedText(name)
    return arg


async def stop_now(server: Server) -> None:
    """Stop at once. asyncua's stop lets its clock task (it writes the server's
    CurrentTime, then sleeps 1 s) end its sleep: every stop took 1 s. The
    clock is cancelled first instead; nothing reads it once the server stops."""
    clock, server.iserver.time_task = server.iserver.time_task, None
    if clock is not None:
        clock.cancel()
        try:
            await clock
        except asyncio.CancelledError:
            pass
    await server.stop()
