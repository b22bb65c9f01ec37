// The published Foxglove WebSocket client (@foxglove/ws-protocol's FoxgloveClient over the `ws` package), as its
// README shows it, for test/test_viewer_clients.py. Usage: node client.mjs URL SUBPROTOCOLS TOPIC...
// SUBPROTOCOLS is a comma-separated list offered in the handshake. Prints one JSON line per event on stdout:
// open (the negotiated subprotocol), advertise (topics), message (topic, schema, encoding, log time, size, and
// the value of a JSON message), error, close. Subscribes to each TOPIC once advertised; exits when closed.
import wsProtocol from "@foxglove/ws-protocol";
import WebSocket from "ws";

const { FoxgloveClient } = wsProtocol;

const [url, offered, ...topics] = process.argv.slice(2);
const ws = new WebSocket(url, offered.split(","));
const client = new FoxgloveClient({ ws });
const channels = new Map(); // subscription id -> channel
const print = (event) => process.stdout.write(JSON.stringify(event) + "\n");

client.on("open", () => print({ event: "open", protocol: ws.protocol }));
client.on("error", (error) => print({ event: "error", message: String(error?.message ?? error) }));
client.on("close", (event) => {
  print({ event: "close", code: event?.code ?? null });
  process.exit(0);
});
client.on("advertise", (advertised) => {
  print({ event: "advertise", topics: advertised.map((channel) => channel.topic) });
  for (const channel of advertised) {
    if (topics.includes(channel.topic)) channels.set(client.subscribe(channel.id), channel);
  }
});
client.on("message", ({ subscriptionId, timestamp, data }) => {
  const channel = channels.get(subscriptionId);
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const json = channel.encoding === "json" ? JSON.parse(new TextDecoder().decode(bytes)) : undefined;
  print({
    event: "message",
    topic: channel.topic,
    schemaName: channel.schemaName,
    encoding: channel.encoding,
    logTime: timestamp.toString(),
    size: bytes.byteLength,
    json,
  });
});
ws.on("unexpected-response", (_request, response) => {
  print({ event: "refused", status: response.statusCode });
  process.exit(0);
});
process.stdin.on("end", () => client.close()); // the test closes our stdin to end the client
process.stdin.resume();
