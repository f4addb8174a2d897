"""SIGHUP reloads corrald's config while it serves: new sandbox limits, allowed origins and rate
apply to the next requests, while an open WebSocket, a running sandbox and its streaming command
go on and a client hammering the API sees no error; an invalid file changes nothing (the log
says why); a key that needs a restart is named in the log and not applied."""
import asyncio
import json
import os
import signal
import threading
import time

from corral_e2e import DaemonTestCase, WsClient, wait_until


class Reload(DaemonTestCase):
    extra_config = 'max_memory = "1G"'

    def log_entries(self, msg):
        entries = []
        for line in self.daemon.log().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == msg:
                entries.append(entry)
        return entries

    def hangup(self, expect):
        before = len(self.log_entries(expect))
        os.kill(self.daemon.proc.pid, signal.SIGHUP)
        wait_until(lambda: len(self.log_entries(expect)) > before, timeout=20, what=f"the log line '{expect}'")
        return self.log_entries(expect)[-1]

    def rewrite(self, sandbox_keys, api_keys=""):
        self.daemon.extra_config = sandbox_keys
        self.daemon.extra_api_config = api_keys
        self.daemon.write_config(self.daemon.port)

    def test_a_reload_applies_to_the_next_requests_and_breaks_nothing(self):
        token = self.token("reload")
        sid = self.create_sandbox(token)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", token)
        own = {"Authorization": "Bearer " + token, "Origin": "https://app.example"}
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", headers=own)[0], 403)  # not allowed yet
        status, body = self.daemon.http("POST", "/v1/sandboxes", token, {"start": False, "limits": {"memory_bytes": 768 << 20}})
        self.assertEqual(status, 201, body)
        self.daemon.http("DELETE", f"/v1/sandboxes/{body['id']}", token)

        errors, done = [], threading.Event()
        load_token = self.token("reload-load")

        def load():
            while not done.is_set():
                status, body = self.daemon.http("GET", "/v1/sandboxes", load_token)
                if status != 200:
                    errors.append((status, body))
                time.sleep(0.02)  # within api.requests_per_minute
        loader = threading.Thread(target=load)
        loader.start()

        async def session():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            reply = await c.request("exec", sandbox=sid, argv=["sh", "-c", "i=0; while [ $i -lt 40 ]; do echo tick$i; i=$((i+1)); sleep 0.1; done"],
                                    output="json")
            self.assertTrue(reply["ok"], reply)
            await asyncio.sleep(0.5)
            # Reloaded with the WebSocket open and the command streaming.
            await asyncio.get_running_loop().run_in_executor(None, self.reload_checks, token, own)
            self.assertTrue((await c.request("ping"))["ok"])
            ticks = []
            while True:
                event = await c.next_event(timeout=30)
                if event.get("event") == "output":
                    ticks.append(event["seq"])
                if event.get("event") == "exit":
                    await c.close()
                    return ticks, event["outcome"]
        try:
            ticks, outcome = self.run_async(session())
        finally:
            done.set()
            loader.join()
        self.assertEqual((outcome["outcome"], outcome["exit_code"]), ("exited", 0))
        self.assertEqual(ticks, list(range(ticks[0], ticks[0] + len(ticks))))  # no output lost across the reloads
        self.assertEqual(errors, [])
        self.assertEqual(self.daemon.http("GET", f"/v1/sandboxes/{sid}", token)[1]["state"], "running")
        # After the reloads, SIGTERM still stops it cleanly (sandboxes keep running).
        self.daemon.stop()
        self.assertEqual(self.daemon.proc.returncode, 0)
        self.assertEqual(len(self.log_entries("stopping; sandboxes keep running")), 1)
        self.daemon.start()
        self.assertEqual(self.daemon.http("GET", f"/v1/sandboxes/{sid}", token)[1]["state"], "running")

    def reload_checks(self, token, own):
        self.rewrite('max_memory = "512M"', 'allowed_origins = ["https://app.example"]')
        self.hangup("config reloaded")
        status, body = self.daemon.http("POST", "/v1/sandboxes", token, {"start": False, "limits": {"memory_bytes": 768 << 20}})
        self.assertEqual(status, 429, body)
        self.assertEqual(body["error"]["code"], "limit_exceeded")
        self.assertIn(str(512 << 20), body["error"]["message"])
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", headers=own)[0], 200)

        # An invalid file: refused, the running config stays.
        with open(self.daemon.config_path) as f:
            text = f.read()
        with open(self.daemon.config_path, "w") as f:
            f.write(text.replace('max_memory = "512M"', 'max_memory = "lots"'))
        refused = self.hangup("reload refused; the running config stays")
        self.assertIn("max_memory", refused["error"])
        self.assertEqual(self.daemon.http("POST", "/v1/sandboxes", token,
                                          {"start": False, "limits": {"memory_bytes": 768 << 20}})[0], 429)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", headers=own)[0], 200)

        # A key that needs a restart: named, not applied (the daemon keeps its port).
        self.rewrite('max_memory = "512M"', 'allowed_origins = ["https://app.example"]')
        port = self.daemon.port
        with open(self.daemon.config_path) as f:
            text = f.read().replace(f"127.0.0.1:{port}", "127.0.0.1:1")
        with open(self.daemon.config_path, "w") as f:
            f.write(text)
        later = self.hangup("changed but applied only at the next start")
        self.assertIn("api.listen", later["keys"])
        self.assertEqual(self.daemon.http("GET", "/healthz")[0], 200)
        self.rewrite('max_memory = "1G"')
