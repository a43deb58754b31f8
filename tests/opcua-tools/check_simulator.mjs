// Drives the simulator as deploy/OPCUA_MAP.md documents it, with node-opcua
// (another stack than asyncua): browse the tree, read the documented variables
// with their types, subscribe, call Robot.Execute and see the handshake end.
// Usage: node check_simulator.mjs opc.tcp://127.0.0.1:4840 ; prints one JSON line.
import {
  AttributeIds, ClientMonitoredItem, ClientSubscription, DataType, MessageSecurityMode, OPCUAClient,
  SecurityPolicy, TimestampsToReturn,
} from "node-opcua-client";

const url = process.argv[2];
const NAMESPACE = "urn:linectl:cell";
const fail = (message) => { console.log("RESULT " + JSON.stringify({ ok: false, error: message })); process.exit(1); };

const client = OPCUAClient.create({
  endpointMustExist: false,
  securityMode: MessageSecurityMode.None,
  securityPolicy: SecurityPolicy.None,
  connectionStrategy: { maxRetry: 3, initialDelay: 200, maxDelay: 1000 },
});
const timer = setTimeout(() => fail("timed out"), 20000);

try {
  await client.connect(url);
  const session = await client.createSession();
  const namespaces = await session.readNamespaceArray();
  const ns = namespaces.indexOf(NAMESPACE);
  if (ns < 0) fail(`no namespace ${NAMESPACE}`);
  const id = (key) => `ns=${ns};s=${key}`;

  const objects = await session.browse("ns=0;i=85");
  const devices = objects.references.filter((r) => r.browseName.namespaceIndex === ns).map((r) => r.browseName.name);
  const mc1 = await session.browse(id("MC1"));
  const mc1Children = mc1.references.map((r) => r.browseName.name);

  const documented = {
    "Cell.Identity": DataType.String,
    "Robot.AckId": DataType.UInt16, "Robot.State": DataType.UInt16, "Robot.DoneId": DataType.UInt16,
    "Robot.ErrorCode": DataType.UInt16, "Robot.Fault": DataType.UInt16, "Robot.ScanText": DataType.String,
    "Dock.Pieces": DataType.UInt16, "Dock.Arrivals": DataType.UInt16, "Buffer.Slot1": DataType.Boolean,
    "MC1.Running": DataType.Boolean, "MC1.MachineryItemState": DataType.String,
    "MC1.Slot1.Done": DataType.Boolean, "MC1.Slot1.JobId": DataType.UInt32,
    "MC1.Slot1.ProductionProgramState": DataType.String, "INSP1.Slot1.ResultEvaluation": DataType.Int32,
  };
  const values = {};
  for (const [key, type] of Object.entries(documented)) {
    const dv = await session.read({ nodeId: id(key), attributeId: AttributeIds.Value });
    if (!dv.statusCode.isGood()) fail(`${key}: ${dv.statusCode.toString()}`);
    if (dv.value.dataType !== type) fail(`${key}: type ${DataType[dv.value.dataType]}, documented ${DataType[type]}`);
    values[key] = dv.value.value;
  }

  const subscription = ClientSubscription.create(session, {
    requestedPublishingInterval: 10, requestedLifetimeCount: 600, requestedMaxKeepAliveCount: 20,
    maxNotificationsPerPublish: 0, publishingEnabled: true, priority: 1,
  });
  const seen = { doneId: [], slot1: [] };
  const watch = (key, into) => {
    const item = ClientMonitoredItem.create(subscription, { nodeId: id(key), attributeId: AttributeIds.Value },
      { samplingInterval: 0, queueSize: 10, discardOldest: true }, TimestampsToReturn.Both);
    item.on("changed", (dv) => into.push(dv.value.value));
  };
  watch("Robot.DoneId", seen.doneId);
  watch("Buffer.Slot1", seen.slot1);
  await new Promise((resolve) => setTimeout(resolve, 300));

  const u16 = (value) => ({ dataType: DataType.UInt16, value });
  const u32 = (value) => ({ dataType: DataType.UInt32, value });
  // DOCK_TO_BUFFER: dock (station 1, slot 0) to buffer (station 2) slot 1, job 77
  const result = await session.call({
    objectId: id("Robot"), methodId: id("Robot.Execute"),
    inputArguments: [u16(1), u16(1), u16(1), u16(0), u16(2), u16(1), u16(0), u32(77), u32(0),
      { dataType: DataType.String, value: "" }],
  });
  if (!result.statusCode.isGood()) fail(`Execute: ${result.statusCode.toString()}`);
  const accepted = result.outputArguments[0].value;
  const until = Date.now() + 10000;
  while (!seen.doneId.includes(1) && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
  const errorCode = (await session.read({ nodeId: id("Robot.ErrorCode"), attributeId: AttributeIds.Value })).value.value;

  await subscription.terminate();
  await session.close();
  await client.disconnect();
  clearTimeout(timer);
  console.log("RESULT " + JSON.stringify({ ok: true, devices, mc1Children, values, accepted, errorCode, seen }));
} catch (err) {
  fail(String(err && err.stack || err));
}
