// A corrald client in Node with the `ws` package, as an operator's backend would write one:
// connects with the corral.v1 subprotocol and a bearer header, runs one command in a sandbox,
// and prints what it got as one JSON line on stdout.
//
//   node ws_client.mjs URL TOKEN SANDBOX [ARG...]     (default command: echo hello-from-node)
//
// Output: {"protocol", "command", "stdout", "stderr", "seqs", "outcome"} and exit 0 when the
// command ran (whatever its outcome); {"refused": {"status", "body"}} and exit 2 when the
// upgrade was refused; {"error": ...} and exit 3 when the exec was refused; exit 1 otherwise.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

// Debian's node-ws lives in /usr/share/nodejs, which Debian's node searches by itself; other
// builds of node (NodeSource) do not, so look there too. npm's `ws` works the same.
function loadWs() {
  for (const name of ["ws", "/usr/share/nodejs/ws"]) {
    try {
      return require(name);
    } catch (e) {
      if (e.code !== "MODULE_NOT_FOUND") throw e;
    }
  }
  console.error("ws_client: the `ws` package is not installed (Debian: apt install node-ws)");
  process.exit(4);
}
const WebSocket = loadWs();

const [url, token, sandbox, ...argv] = process.argv.slice(2);
if (!url || !token || !sandbox) {
  console.error("usage: node ws_client.mjs URL TOKEN SANDBOX [ARG...]");
  process.exit(1);
}
const command = argv.length ? argv : ["echo", "hello-from-node"];

const print = (object, code) => {
  process.stdout.write(JSON.stringify(object) + "\n");
  process.exit(code);
};
const timer = setTimeout(() => print({ error: "timed out" }, 1), 30000);

const ws = new WebSocket(url, ["corral.v1"], { headers: { Authorization: `Bearer ${token}` } });
ws.binaryType = "nodebuffer";

ws.on("unexpected-response", (request, response) => {
  let body = "";
  response.setEncoding("utf8");
  response.on("data", (chunk) => (body += chunk));
  response.on("end", () => {
    let parsed = body;
    try {
      parsed = JSON.parse(body);
    } catch {}
    clearTimeout(timer);
    print({ refused: { status: response.statusCode, body: parsed } }, 2);
  });
});
ws.on("error", (error) => {
  clearTimeout(timer);
  print({ error: String(error.message || error) }, 1);
});

const result = { protocol: null, command: null, stdout: "", stderr: "", seqs: [], outcome: null };
let channel = null;
const chunks = { 1: [], 2: [] };

ws.on("open", () => {
  result.protocol = ws.protocol;
  ws.send(JSON.stringify({ id: 1, op: "exec", sandbox, argv: command }));
});

ws.on("message", (data, isBinary) => {
  if (isBinary) {
    // byte 0 kind (1: output), byte 1 fd, bytes 2-5 channel, bytes 6-13 seq, then the data
    if (data[0] !== 1 || data.readUInt32BE(2) !== channel) return;
    chunks[data[1]].push(data.subarray(14));
    result.seqs.push(Number(data.readBigUInt64BE(6)));
    return;
  }
  const message = JSON.parse(data.toString("utf8"));
  if (message.id === 1) {
    if (!message.ok) {
      clearTimeout(timer);
      ws.close();
      print({ error: message.error }, 3);
    }
    result.command = message.result.command;
    channel = message.result.channel;
    return;
  }
  if (message.event === "exit" && message.command === result.command) {
    result.seqs.push(message.seq);
    result.outcome = message.outcome;
    result.stdout = Buffer.concat(chunks[1]).toString("utf8");
    result.stderr = Buffer.concat(chunks[2]).toString("utf8");
    clearTimeout(timer);
    ws.close(1000);
    ws.on("close", () => print(result, 0));
  }
});
