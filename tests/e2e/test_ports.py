"""corrald end to end: preview URLs for sandbox ports (issue 21 part 2, THREATS 46).

Inside a sandbox, Python's http.server (port 8000) and a `websockets` echo server (port 8765) listen
on the sandbox's own 127.0.0.1. The ports are shown (POST /v1/sandboxes/{id}/ports) and reached
through both URL forms, the path form (/v1/sandboxes/{id}/ports/{port}/) and the host form (Host:
PORT-sb-XXXX.<ports.domain>, sent to corrald's listener as a wildcard DNS name would), with real
clients (http.client, websockets): with the owner's token and with a signed URL. Refused, each with
the same 404 as a sandbox that does not exist, beside its allowed control: a signature with its
port, sandbox or expiry changed, an expired one, another user's token, a port not shown, a token or
signature of another port; a shown port of a sandbox that stopped. The app never sees corral's
token, parameters or cookie; the daemon's log never holds a signature; a connection beyond
ports.max_connections_per_port is refused; port.opened and port.closed are events.
"""
import asyncio
import http.client
import json
import time
import unittest

import websockets

from corral_e2e import DaemonTestCase, WsClient, mint, wait_until

DOMAIN = "preview.test"

# The app: echoes what it was asked as JSON (path, Host, Authorization, Cookie, X-Forwarded-Prefix,
# Sec-WebSocket-Protocol), and on some paths answers as a careless or hostile app would.
HTTP_APP = r"""
import http.server, json, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def seen(self, extra=None):
        seen = {"path": self.path, "host": self.headers.get("Host"),
                "authorization": self.headers.get("Authorization"),
                "cookie": self.headers.get("Cookie"),
                "prefix": self.headers.get("X-Forwarded-Prefix"),
                "protocols": self.headers.get("Sec-WebSocket-Protocol")}
        seen.update(extra or {})
        return json.dumps(seen).encode()
    def answer(self, body, headers=()):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/early":  # an interim answer first: the final one must still be corral's
            self.send_response_only(103)
            self.send_header("Link", "</style.css>; rel=preload")
            self.end_headers()
            body = b"<script>parent</script>"
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        elif path == "/lf":  # bare LF line ends: no head corral could vouch for
            self.wfile.write(b"HTTP/1.1 200 OK\nContent-Type: text/html\nContent-Length: 5\n\nhello")
        elif path == "/cookie":
            self.answer(self.seen(), [("Set-Cookie", "sid=1; Domain=preview.test; Path=/; HttpOnly"),
                                      ("Set-Cookie", "theme=dark")])
        elif path == "/keepalive":
            self.answer(self.seen(), [("Connection", "keep-alive"), ("Keep-Alive", "timeout=60")])
        elif path == "/drip":  # one byte a second for 6 s, and nothing from the client meanwhile
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "6")
            self.end_headers()
            for _ in range(6):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(1)
        elif path == "/silent":  # says nothing for longer than ports.idle_timeout
            time.sleep(10)
            self.answer(b"late")
        else:
            self.answer(self.seen())
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        data = b""
        while len(data) < length:  # all of the body before any answer
            chunk = self.rfile.read(length - len(data))
            if not chunk:
                break
            data += chunk
        self.answer(self.seen({"received": len(data)}))
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""

WS_APP = r"""
import asyncio, websockets
async def echo(ws, path=None):
    async for message in ws:
        await ws.send("echo:" + message)
async def main():
    async with websockets.serve(echo, "127.0.0.1", 8765):
        await asyncio.Future()
asyncio.run(main())
"""


class Ports(DaemonTestCase):
    extra_sections = f"""
[ports]
domain = "{DOMAIN}"
max_connections_per_port = 3
max_ttl = 600
idle_timeout = 4
"""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.alice = mint_token(cls, "alice")
        cls.sb = cls.daemon.http("POST", "/v1/sandboxes", cls.alice, {})[1]
        cls.sid = cls.sb["id"]

        async def start_servers():
            c = await WsClient.connect(cls.daemon.ws_url(), cls.alice)
            try:
                for script in (HTTP_APP, WS_APP):
                    reply = await c.request("exec", sandbox=cls.sid, argv=["python3", "-c", script])
                    assert reply["ok"], reply
            finally:
                await c.close()
        asyncio.run(start_servers())
        for port in (8000, 8765):
            status, body = cls.daemon.http("POST", f"/v1/sandboxes/{cls.sid}/ports", cls.alice, {"port": port})
            assert status == 201, body

        def listening(port):  # the apps started: no longer 502
            status = cls.daemon.http("GET", f"/v1/sandboxes/{cls.sid}/ports/{port}/", cls.alice)[0]
            return status != 502
        for port in (8000, 8765):
            wait_until(lambda: listening(port), 30, what=f"the app on port {port}")

    # ---- clients ----

    def get(self, path, headers=None, host=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=30)
        hdrs = dict(headers or {})
        if host:
            hdrs["Host"] = host
        conn.request("GET", path, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, resp, data

    def app(self, path, headers=None, host=None, expect=200):
        deadline = time.time() + 30
        while True:
            status, resp, data = self.get(path, headers, host)
            if status != 502 or time.time() > deadline:  # the app still starting
                break
            time.sleep(0.2)
        self.assertEqual(status, expect, data[:300])
        return resp, json.loads(data) if expect == 200 else json.loads(data)

    def host(self, port, sid=None):
        return f"{port}-{(sid or self.sid).replace('sb_', 'sb-')}.{DOMAIN}"

    def signed(self, port, ttl=60):
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports/{port}/signed-url", self.alice,
                                        {"ttl_s": ttl})
        self.assertEqual(status, 200, body)
        return body

    # ---- tests ----

    def test_api_lists_ports_with_both_urls_and_records_events(self):
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{self.sid}/ports", self.alice)
        self.assertEqual(status, 200, body)
        by_port = {p["port"]: p for p in body["ports"]}
        self.assertEqual(by_port[8000]["path_url"], f"/v1/sandboxes/{self.sid}/ports/8000/")
        self.assertEqual(by_port[8000]["url"], f"https://{self.host(8000)}/")
        self.assertFalse(by_port[8000]["public"])
        status, events = self.daemon.http("GET", f"/v1/sandboxes/{self.sid}/events?type=port.opened", self.alice)
        self.assertEqual(status, 200, events)
        self.assertEqual(sorted(e["data"]["port"] for e in events["events"]), [8000, 8765])
        # corral's own services in the sandbox are never shown; public needs its scope.
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports", self.alice, {"port": 7880})
        self.assertEqual(status, 400, body)
        # A field the API does not know is refused, not ignored (the setup's {"port"} is the control).
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports", self.alice, {"port": 8000, "pubilc": True})
        self.assertEqual((status, body["error"]["code"]), (400, "bad_request"), body)
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports/8000/signed-url", self.alice, {"ttl": 5})
        self.assertEqual(status, 400, body)
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports", self.alice,
                                        {"port": 8000, "public": True})
        self.assertEqual(status, 403, body)

    def test_delete_and_stop_close_ports(self):
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports", self.alice, {"port": 8001})
        self.assertEqual(status, 201, body)
        status, body = self.daemon.http("DELETE", f"/v1/sandboxes/{self.sid}/ports/8001", self.alice)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.get(f"/v1/sandboxes/{self.sid}/ports/8001/?token={self.alice}")[0], 404)
        self.app(f"/v1/sandboxes/{self.sid}/ports/8000/?token={self.alice}")  # control: 8000 still shown
        other = self.daemon.http("POST", "/v1/sandboxes", self.alice, {})[1]
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{other['id']}/ports", self.alice, {"port": 8000})
        self.assertEqual(status, 201, body)
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{other['id']}/stop", self.alice)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.daemon.http("GET", f"/v1/sandboxes/{other['id']}/ports", self.alice)[1]["ports"], [])
        status, events = self.daemon.http("GET", f"/v1/sandboxes/{other['id']}/events?type=port.closed", self.alice)
        self.assertEqual([e["data"] for e in events["events"]], [{"port": 8000, "reason": "sandbox_stopped"}])
        status, events = self.daemon.http("GET", f"/v1/sandboxes/{self.sid}/events?type=port.closed", self.alice)
        self.assertIn({"port": 8001, "reason": "request"}, [e["data"] for e in events["events"]])
        self.daemon.http("DELETE", f"/v1/sandboxes/{other['id']}", self.alice)

    def test_path_and_host_forms_with_a_token(self):
        resp, seen = self.app(f"/v1/sandboxes/{self.sid}/ports/8000/hello?x=1&token={self.alice}")
        self.assertEqual(seen["path"], "/hello?x=1")
        self.assertEqual(seen["host"], "localhost:8000")
        self.assertEqual(seen["prefix"], f"/v1/sandboxes/{self.sid}/ports/8000")
        self.assertIn("sandbox", resp.getheader("Content-Security-Policy", ""))
        resp, seen = self.app("/a/b", headers={"Authorization": "Bearer " + self.alice}, host=self.host(8000))
        self.assertEqual(seen["path"], "/a/b")
        self.assertEqual(seen["host"], self.host(8000))
        self.assertIsNone(seen["authorization"], "the token never reaches the app")

    def test_signed_urls_work_in_both_forms_and_set_a_cookie_for_the_host(self):
        body = self.signed(8000)
        resp, seen = self.app(body["path_url"])
        self.assertEqual(seen["path"], "/")
        path_query = body["url"].split("/", 3)[3]  # "?corral_sig=...&corral_exp=..." after the host
        resp, seen = self.app("/" + path_query, host=self.host(8000))
        self.assertEqual(seen["path"], "/", "corral's parameters never reach the app")
        cookie = resp.getheader("Set-Cookie")
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Lax", cookie)
        pair = cookie.split(";")[0]
        # The cookie alone opens the next request, and the app does not see it (its own does pass).
        resp, seen = self.app("/next", headers={"Cookie": pair + "; mine=1"}, host=self.host(8000))
        self.assertEqual(seen["cookie"], "mine=1")
        # Not another port's: the same cookie to 8765's host is refused.
        self.app("/", headers={"Cookie": pair}, host=self.host(8765), expect=404)
        sig = body["path_url"].split("corral_sig=")[1].split("&")[0]
        self.assertNotIn(sig, self.daemon.log(), "a signature is never logged")

    def test_changed_expired_and_foreign_signatures_get_the_404_of_no_sandbox(self):
        body = self.signed(8000)
        good = body["path_url"]
        self.app(good)  # control
        sig = good.split("corral_sig=")[1].split("&")[0]
        exp = int(good.split("corral_exp=")[1])
        nothing = self.get("/v1/sandboxes/sb_aaaaaaaaaaaaaaaaaaaaaaaaaa/ports/8000/")  # no such sandbox
        self.assertEqual(nothing[0], 404)
        refusals = {
            "port changed": good.replace("/ports/8000/", "/ports/8765/"),
            "expiry changed": good.replace(f"corral_exp={exp}", f"corral_exp={exp + 3600}"),
            "signature changed": good.replace(sig, ("A" if sig[0] != "A" else "B") + sig[1:]),
            "sandbox changed": good.replace(self.sid, "sb_aaaaaaaaaaaaaaaaaaaaaaaaaa"),
            "no signature": good.split("?")[0],
        }
        for what, url in refusals.items():
            status, _, data = self.get(url)
            self.assertEqual(status, 404, what)
            self.assertEqual(json.loads(data)["error"]["code"], "not_found", what)
        short = self.signed(8000, ttl=1)["path_url"]
        self.app(short)  # control: good while it lasts
        time.sleep(2.2)
        self.assertEqual(self.get(short)[0], 404, "expired")
        # Another user's token, and a port not shown: the same 404.
        bob = mint_token(self, "bob")
        self.assertEqual(self.get(f"/v1/sandboxes/{self.sid}/ports/8000/?token={bob}")[0], 404)
        self.assertEqual(self.get(f"/v1/sandboxes/{self.sid}/ports/9999/?token={self.alice}")[0], 404)
        status, _ = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports/8000/signed-url", bob, {})
        self.assertEqual(status, 404)

    def test_websocket_echo_through_both_forms_with_token_and_signature(self):
        base = f"ws://127.0.0.1:{self.daemon.port}"
        signed = self.signed(8765)

        async def echo(url, **kwargs):
            async with websockets.connect(url, **kwargs) as ws:
                await ws.send("hi")
                return await asyncio.wait_for(ws.recv(), 10)

        async def go():
            return [await echo(f"{base}/v1/sandboxes/{self.sid}/ports/8765/?token={self.alice}"),
                    await echo(base + signed["path_url"]),
                    # The host form: the URL's host is the Host header; the socket goes to corrald.
                    await echo(f"ws://{self.host(8765)}:{self.daemon.port}/", host="127.0.0.1",
                               port=self.daemon.port, extra_headers={"Authorization": "Bearer " + self.alice}),
                    await echo(f"ws://{self.host(8765)}:{self.daemon.port}/?" + signed["url"].split("?")[1],
                               host="127.0.0.1", port=self.daemon.port)]
        got = asyncio.run(go())
        self.assertEqual(got, ["echo:hi"] * 4)
        with self.assertRaises(websockets.exceptions.InvalidStatusCode) as refused:
            asyncio.run(echo(base + signed["path_url"].replace("/ports/8765/", "/ports/8000/")))
        self.assertEqual(refused.exception.status_code, 404)

    def raw(self, request, timeout=20):
        """The bytes corrald answers `request` (bytes) with, up to the connection's end."""
        import socket
        with socket.create_connection(("127.0.0.1", self.daemon.port), timeout=timeout) as s:
            s.sendall(request)
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return out
                out += chunk

    def path_request(self, path, extra=""):
        return (f"GET /v1/sandboxes/{self.sid}/ports/8000{path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {self.alice}\r\n{extra}\r\n").encode()

    def test_the_apps_answer_reaches_the_client_as_a_head_of_corrals_making(self):
        # An interim 103 before the final answer: the final head too has the path form's policy
        # (a page on corral's origin without it could read the page's token).
        data = self.app_raw(self.path_request("/early"))
        heads = [part for part in data.split(b"\r\n\r\n") if part.startswith(b"HTTP/1.1")]
        self.assertEqual([h.split(b"\r\n")[0] for h in heads], [b"HTTP/1.1 103 Early Hints", b"HTTP/1.1 200 OK"], data)
        for head in heads:
            self.assertIn(b"Content-Security-Policy: sandbox", head)
        self.assertIn(b"Connection: close", heads[1])
        # Bare LF line ends: not passed on as they are, but refused.
        status, _, data = self.get(f"/v1/sandboxes/{self.sid}/ports/8000/lf?token={self.alice}")
        self.assertEqual(status, 502, data)
        self.assertEqual(json.loads(data)["error"]["code"], "bad_gateway")
        self.app(f"/v1/sandboxes/{self.sid}/ports/8000/?token={self.alice}")  # control: a proper answer passes
        # The app asks to keep the connection: the client is told it closes (no second request on
        # it could pass by corral's head).
        resp, _ = self.app(f"/v1/sandboxes/{self.sid}/ports/8000/keepalive?token={self.alice}")
        self.assertEqual(resp.getheader("Connection"), "close")
        self.assertIsNone(resp.getheader("Keep-Alive"))

    def test_an_apps_cookies_stay_with_its_port(self):
        resp, _ = self.app("/cookie", headers={"Authorization": "Bearer " + self.alice}, host=self.host(8000))
        cookies = resp.headers.get_all("Set-Cookie")
        self.assertEqual(cookies, ["sid=1; Path=/; HttpOnly", "theme=dark"], "no Domain: the port's host alone")
        prefix = f"/v1/sandboxes/{self.sid}/ports/8000/"
        resp, _ = self.app(prefix + f"cookie?token={self.alice}")
        self.assertEqual(resp.headers.get_all("Set-Cookie"), [f"sid=1; HttpOnly; Path={prefix}", f"theme=dark; Path={prefix}"],
                         "on corral's own origin, the port's path alone")

    def test_a_body_the_app_reads_before_answering_goes_through(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=30)
        body = b"z" * (3 << 20)
        conn.request("POST", f"/v1/sandboxes/{self.sid}/ports/8000/upload", body=body,
                     headers={"Authorization": "Bearer " + self.alice})
        resp = conn.getresponse()
        seen = json.loads(resp.read())
        conn.close()
        self.assertEqual(resp.status, 200)
        self.assertEqual(seen["received"], len(body))

    def test_corrals_tokens_of_any_user_never_reach_the_app(self):
        bob = mint_token(self, "bob")
        signed = self.signed(8000)["path_url"]
        # Bob's token beside alice's signed URL: it opens nothing, and the app never sees it.
        resp, seen = self.app(signed, headers={"Authorization": "Bearer " + bob,
                                               "Sec-WebSocket-Protocol": f"chat, bearer.{bob}"})
        self.assertIsNone(seen["authorization"])
        self.assertEqual(seen["protocols"], "chat")
        # Control: the app's own credentials pass.
        resp, seen = self.app(signed, headers={"Authorization": "Bearer apps-own",
                                               "Sec-WebSocket-Protocol": "chat, bearer.apps-own"})
        self.assertEqual(seen["authorization"], "Bearer apps-own")
        self.assertEqual(seen["protocols"], "chat, bearer.apps-own")
        # A public port: anyone, and still no token of corral's passes.
        path = f"/v1/sandboxes/{self.sid}/ports/8000/pub"
        self.assertEqual(self.get(path)[0], 404)  # control: not public yet
        public = mint("acme", self.secret, "alice", scope=["sandboxes", "ports:public"])
        try:
            status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports", public, {"port": 8000, "public": True})
            self.assertEqual(status, 201, body)
            self.assertTrue(body["public"])
            _, seen = self.app(path)
            _, seen = self.app(path, headers={"Authorization": "Bearer " + bob})
            self.assertIsNone(seen["authorization"])
        finally:
            status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports", self.alice, {"port": 8000})
            self.assertEqual(status, 201, body)
        self.assertEqual(self.get(path)[0], 404, "private again")

    def test_closing_a_port_ends_the_connections_open_to_it(self):
        async def go():
            ws = await websockets.connect(f"ws://127.0.0.1:{self.daemon.port}/v1/sandboxes/{self.sid}/ports/8765/",
                                          extra_headers={"Authorization": "Bearer " + self.alice})
            try:
                await ws.send("one")
                self.assertEqual(await asyncio.wait_for(ws.recv(), 10), "echo:one")  # control
                status, body = self.daemon.http("DELETE", f"/v1/sandboxes/{self.sid}/ports/8765", self.alice)
                self.assertEqual(status, 200, body)
                with self.assertRaises(websockets.exceptions.ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 10)
            finally:
                await ws.close()
        try:
            asyncio.run(go())
        finally:
            status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/ports", self.alice, {"port": 8765})
            self.assertEqual(status, 201, body)

    def test_idle_is_no_byte_either_way(self):
        # 6 s of a byte a second, the client silent: longer than ports.idle_timeout (4 s), never idle.
        status, _, data = self.get(f"/v1/sandboxes/{self.sid}/ports/8000/drip?token={self.alice}")
        self.assertEqual((status, data), (200, b"xxxxxx"))
        # Nothing either way for longer: the connection ends without the app's late answer.
        data = self.app_raw(self.path_request("/silent"))
        self.assertNotIn(b"late", data)

    def app_raw(self, request):
        """raw(), retried while the app is still starting (a 502)."""
        deadline = time.time() + 30
        while True:
            data = self.raw(request)
            if not data.startswith(b"HTTP/1.1 502") or time.time() > deadline:
                return data
            time.sleep(0.2)

    def test_connections_per_port_are_bounded(self):
        import socket
        held = []
        try:
            for _ in range(3):
                s = socket.create_connection(("127.0.0.1", self.daemon.port))
                # A body the app waits for (it reads all of one before answering) and never gets.
                s.sendall(f"POST /v1/sandboxes/{self.sid}/ports/8000/upload HTTP/1.1\r\nHost: x\r\n"
                          f"Authorization: Bearer {self.alice}\r\nContent-Length: 100\r\n\r\n".encode())
                held.append(s)
            time.sleep(0.5)
            status, _, _ = self.get(f"/v1/sandboxes/{self.sid}/ports/8000/?token={self.alice}")
            self.assertEqual(status, 503)
        finally:
            for s in held:
                s.close()
        wait_until(lambda: self.get(f"/v1/sandboxes/{self.sid}/ports/8000/?token={self.alice}")[0] == 200,
                   what="a connection once the others closed")


def mint_token(case, sub):
    return mint("acme", case.secret, sub)


if __name__ == "__main__":
    unittest.main()
