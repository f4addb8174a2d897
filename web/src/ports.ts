// The page's list of the open sandbox's ports (docs/PROTOCOL.md "Ports"): each with a link for a
// browser tab (a signed URL, so the tab needs no token; the host form when the daemon has a
// preview domain, else the path form) and a button that closes it; a form shows another. The
// list follows the daemon's (polled while the sandbox is open: another client may show a port).
import type { CorralClient, SandboxPort } from "../../sdk/typescript/src/client.ts";
import { CorralError } from "../../sdk/typescript/src/errors.ts";

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const POLL_MS = 5000;
const LINK_TTL_S = 3600;

let client: CorralClient | null = null;
let sandboxId = "";
let timer: ReturnType<typeof setInterval> | undefined;
let shown = "";  // the ports drawn, to redraw only on a change
let generation = 0;  // of refreshes: only the newest one draws

function describe(error: unknown): string {
  if (error instanceof CorralError) return `${error.code}: ${error.message}`;
  return (error as Error)?.message ?? String(error);
}

async function linkOf(port: SandboxPort): Promise<string> {
  const signed = await client!.signPortUrl(sandboxId, port.port, { ttlS: LINK_TTL_S });
  return signed.url ?? client!.urlOf(signed.path_url);
}

// Lists the ports and draws them when they changed. Only the newest refresh draws (a poll and the
// form's refresh may overlap; the one begun later asked later), and a list counts as drawn only
// once it is: a refresh that fails on the way (a link not signed) leaves the next poll to draw.
async function refresh(force = false) {
  if (!client || !sandboxId) return;
  const id = sandboxId;
  const mine = ++generation;
  const ports = await client.listPorts(id);
  const key = JSON.stringify(ports.map((p) => [p.port, p.public]));
  if (id !== sandboxId || mine !== generation || (key === shown && !force)) return;
  const items = await Promise.all(ports.map(async (port) => {
    const item = document.createElement("li");
    item.dataset.port = String(port.port);
    const link = document.createElement("a");
    link.textContent = String(port.port);
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    link.href = await linkOf(port);
    const close = document.createElement("button");
    close.textContent = "close";
    close.title = `close port ${port.port}`;
    close.onclick = () => {
      client!.closePort(id, port.port).then(() => refresh()).catch((e) => ($("ports-error").textContent = describe(e)));
    };
    item.append(link, port.public ? " (public) " : " ", close);
    return item;
  }));
  if (id !== sandboxId || mine !== generation) return;
  $("ports-list").replaceChildren(...items);
  $("ports-none").hidden = ports.length > 0;
  shown = key;
}

// The sandbox the page has open (or none: ""), and the client to ask.
export function followPorts(c: CorralClient | null, id: string) {
  client = c;
  sandboxId = id;
  shown = "";
  $("ports-list").replaceChildren();
  $("ports-error").textContent = "";
  clearInterval(timer);
  timer = undefined;
  if (!c || !id) return;
  const poll = () => refresh().catch((e) => ($("ports-error").textContent = describe(e)));
  poll();
  timer = setInterval(poll, POLL_MS);
}

export function wirePorts() {
  $("port-form").onsubmit = (event) => {
    event.preventDefault();
    const input = $("port-number") as HTMLInputElement;
    const port = Number(input.value);
    if (!client || !sandboxId) return;
    $("ports-error").textContent = "";
    client.openPort(sandboxId, port)
      .then(() => { input.value = ""; return refresh(true); })
      .catch((e) => ($("ports-error").textContent = describe(e)));
  };
}
