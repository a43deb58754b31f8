"""The simulator's standard OPC UA address space, built once per process
(``services.hardware.sim.asyncua_server.StandardAddressSpace``): a server that
starts from the kept copy has the same nodes as one that built its own, and a
change one server makes to a standard node is its own."""

import asyncio
import gc

from asyncua import Server, ua
from asyncua.server.standard_address_space import standard_address_space

from services.hardware.sim.asyncua_server import LazyNodes, StandardAddressSpace

SERVER_STATUS = ua.NodeId(ua.ObjectIds.Server_ServerStatus)
OBJECTS = ua.NodeId(ua.ObjectIds.ObjectsFolder)


async def _started(space: StandardAddressSpace) -> Server:
    server = Server()
    space.install(server)
    await server.init()
    return server


def _view(server: Server, node_id: ua.NodeId):
    node = server.iserver.aspace[node_id]
    return ([(r.ReferenceTypeId, r.NodeId, r.IsForward) for r in node.references],
            {attr: data.value.Value for attr, data in node.attributes.items() if attr != ua.AttributeIds.Value})


def test_later_servers_start_from_the_copy_with_the_same_nodes(monkeypatch):
    builds = []
    fill = standard_address_space.fill_address_space
    monkeypatch.setattr(standard_address_space, "fill_address_space", lambda *a: (builds.append(1), fill(*a)))

    async def scenario():
        space = StandardAddressSpace(kept_build=1)
        built = [await _started(space)]
        copies = [await _started(space) for _ in range(2)]
        return built, copies

    gc.disable()  # as the simulator does while it builds: 500k objects, scanned at every pass
    try:
        built, copies = asyncio.run(scenario())
    finally:
        gc.enable()
    assert len(builds) == 1  # the first builds; the later ones do not
    assert all(isinstance(s.iserver.aspace._nodes, LazyNodes) for s in copies)
    for node_id in (SERVER_STATUS, OBJECTS, ua.NodeId(ua.ObjectIds.Server_NamespaceArray)):
        assert _view(copies[0], node_id) == _view(built[0], node_id)
    assert set(copies[0].iserver.aspace.keys()) == set(built[0].iserver.aspace.keys())

    # A node one copy changes is that copy's own.
    copies[0].iserver.aspace[OBJECTS].references.clear()
    assert _view(copies[1], OBJECTS) == _view(built[0], OBJECTS)
    del copies[0].iserver.aspace[SERVER_STATUS]
    assert SERVER_STATUS not in copies[0].iserver.aspace and SERVER_STATUS in copies[1].iserver.aspace
