"""Secrets, ports and checkpoints through the SDK (the scenarios of
sdk/typescript/test/secrets.test.mjs, ports.test.mjs and checkpoints.test.mjs; what the proxy
does with secrets, both URL forms and the hostile cases are the e2e suites' own)."""
import asyncio
import re
import time

import httpx

import corral
from helpers import DaemonTest, ai_budget, main_requests, play, scenario, token, user_texts

VALUE = "ghp_" + "s3cr3t" * 6


class Secrets(DaemonTest):
    async def test_a_secret_is_kept_listed_without_its_value_and_seen_as_a_placeholder(self):
        c = self.client("py-secrets")
        stored = await c.put_secret("GITHUB_TOKEN", VALUE, [corral.SecretBinding(hosts=["github.test"],
                                                                                 basic_user="x-access-token")])
        self.assertEqual((stored.name, stored.owner), ("GITHUB_TOKEN", "user"))
        self.assertEqual((stored.bindings[0].hosts, stored.bindings[0].basic_user), (["github.test"], "x-access-token"))
        mine, _ = await c.list_secrets()
        self.assertEqual([s.name for s in mine], ["GITHUB_TOKEN"])
        self.assertNotIn(VALUE, str([s.raw for s in mine]))
        self.addAsyncCleanup(c.delete_secret, "GITHUB_TOKEN")

        sandbox = await self.sandbox(c, secrets=["GITHUB_TOKEN"])
        self.assertEqual(sandbox.secrets, ["GITHUB_TOKEN"])
        seen = (await c.run(sandbox.id, 'echo "$GITHUB_TOKEN"')).stdout
        self.assertRegex(seen.strip(), r"^corral-placeholder-[0-9a-f]{32}$")
        await c.put_secret("NPM_TOKEN", "npm_" + "x" * 20, [{"hosts": ["registry.test"], "path_prefixes": ["/private/"]}])
        self.addAsyncCleanup(c.delete_secret, "NPM_TOKEN")
        changed = await c.set_sandbox_secrets(sandbox.id, ["NPM_TOKEN", "GITHUB_TOKEN"])
        self.assertEqual((changed.secrets, changed.ca_trusted), (["GITHUB_TOKEN", "NPM_TOKEN"], True))
        self.assertEqual(await c.get_sandbox_secrets(sandbox.id), ["GITHUB_TOKEN", "NPM_TOKEN"])

    async def test_bad_input_and_a_token_without_the_scope_are_refused(self):
        c = self.client("py-secrets-bad")
        for name, value, bindings in (("bad-name", VALUE, [{"hosts": ["a.test"]}]), ("PATH", VALUE, [{"hosts": ["a.test"]}]),
                                      ("OK", "a\r\nX-Evil: 1", [{"hosts": ["a.test"]}]), ("OK", VALUE, [])):
            with self.assertRaises(corral.CorralError) as caught:
                await c.put_secret(name, value, bindings)
            self.assertEqual(caught.exception.code, "bad_request", name)
        narrow = self.client("py-secrets-bad", {"scopes": ["sandboxes", "exec"]})
        with self.assertRaises(corral.CorralError) as caught:
            await narrow.put_secret("OK", VALUE, [{"hosts": ["a.test"]}])
        self.assertEqual((caught.exception.code, caught.exception.status), ("forbidden", 403))
        await c.put_secret("OK", VALUE, [{"hosts": ["a.test"]}])  # positive control
        await c.delete_secret("OK")
        with self.assertRaises(corral.CorralError) as caught:
            await c.delete_secret("OK")
        self.assertEqual(caught.exception.code, "not_found")


class Ports(DaemonTest):
    async def test_a_shown_port_is_reached_with_the_token_and_a_signed_url_then_closed(self):
        c = self.client("py-ports")
        sandbox = await self.sandbox(c)
        await c.exec(sandbox.id, "cd \"$(mktemp -d)\" && echo 'hi from the sandbox' > hello.txt && "
                                 "exec python3 -m http.server 8000 --bind 127.0.0.1")
        shown = await c.open_port(sandbox.id, 8000)
        self.assertEqual((shown.port, shown.public, shown.path_url), (8000, False, f"/v1/sandboxes/{sandbox.id}/ports/8000/"))
        self.assertEqual([p.port for p in await c.list_ports(sandbox.id)], [8000])
        async with httpx.AsyncClient() as web:
            headers = {"Authorization": f"Bearer {token('py-ports')}"}
            deadline = time.monotonic() + 30
            while True:
                reached = await web.get(c.url_of(shown.path_url + "hello.txt"), headers=headers)
                if reached.status_code != 502 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            self.assertEqual((reached.status_code, reached.text), (200, "hi from the sandbox\n"))
            signed = await c.sign_port_url(sandbox.id, 8000, ttl_s=60)
            self.assertGreater(signed.expires_at, time.time())
            path, query = signed.path_url.split("?")
            self.assertEqual((await web.get(c.url_of(f"{path}hello.txt?{query}"))).status_code, 200)
            changed = re.sub(r"corral_sig=(.)", lambda m: "corral_sig=" + ("B" if m.group(1) == "A" else "A"), query)
            self.assertEqual((await web.get(c.url_of(f"{path}hello.txt?{changed}"))).status_code, 404)
            bob = self.client("py-ports-bob")
            with self.assertRaises(corral.CorralError) as caught:
                await bob.sign_port_url(sandbox.id, 8000)
            self.assertEqual((caught.exception.code, caught.exception.status), ("not_found", 404))
            with self.assertRaises(corral.CorralError) as caught:
                await c.open_port(sandbox.id, 8000, public=True)
            self.assertEqual(caught.exception.code, "forbidden")
            await c.close_port(sandbox.id, 8000)
            self.assertEqual(await c.list_ports(sandbox.id), [])
            self.assertEqual((await web.get(c.url_of(f"{path}hello.txt?{query}"))).status_code, 404)


class Checkpoints(DaemonTest):
    async def test_a_restored_checkpoint_brings_back_the_turns_file_and_its_history(self):
        c = self.client("py-checkpoints", {"budget": ai_budget()})
        sandbox = await self.sandbox(c, name="checkpoints")
        play(scenario("checkpoint_turns"))
        session = await c.create_session(sandbox.id, prompt="first: write note.txt")
        await self.within(session.result(), 120, "turn 1")
        checkpoint = await c.checkpoint_session(session.id)
        self.assertTrue(checkpoint.id.startswith("chk_"))
        self.assertEqual((checkpoint.turns, checkpoint.session), (1, session.id))
        await self.within(session.turn("second: change it"), 120, "turn 2")
        self.assertEqual(await c.read_text(sandbox.id, "/home/agent/note.txt"), "two\n")
        self.assertTrue(any(isinstance(e, corral.CheckpointEvent) and e.checkpoint == checkpoint.id
                            for e in session.history))
        await session.close()
        await self.within(session.wait(), 60, "the session's end")

        self.assertEqual([k.id for k in await c.list_checkpoints(session.id)], [checkpoint.id])
        self.assertEqual((await c.get_checkpoint(checkpoint.id)).snapshot, checkpoint.snapshot)
        with self.assertRaises(corral.CorralError) as caught:
            await self.client("py-checkpoints-stranger").get_checkpoint(checkpoint.id)
        self.assertEqual((caught.exception.code, caught.exception.status), ("not_found", 404))

        play(scenario("checkpoint_restored"))
        restored = await c.restore_checkpoint(checkpoint.id, prompt="third: where are we?")
        await self.within(restored.result(), 120, "the restored session's turn")
        self.assertNotEqual(restored.id, session.id)
        self.assertEqual((await c.get_session(restored.id)).parent, session.id)
        self.assertEqual(await c.read_text(sandbox.id, "/home/agent/note.txt"), "one\n")
        texts = user_texts(main_requests()[0])
        self.assertTrue(any("first: write note.txt" in t for t in texts), texts)
        self.assertFalse(any("second: change it" in t for t in texts), texts)
        await restored.close()
        await self.within(restored.wait(), 60, "the restored session's end")
        await c.delete_checkpoint(checkpoint.id)
        with self.assertRaises(corral.CorralError) as caught:
            await c.get_checkpoint(checkpoint.id)
        self.assertEqual(caught.exception.code, "not_found")
