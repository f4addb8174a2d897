"""Tokens on an open connection (docs/PROTOCOL.md, op `auth`; the scenarios of
sdk/typescript/test/renewal.test.mjs): corrald closes a WebSocket when its token expires (close
1008). A client with a get_token callback renews the token on the open socket before it expires,
so a command that outlives several tokens streams to its end on one connection; the control, a
client with a fixed token, loses its connection at the expiry. (The harness's corrald allows 1 s
of clock skew.) The synchronous client's get_token runs in a worker thread and renews too."""
import corral
from helpers import DaemonTest, ENV, token


class Renewal(DaemonTest):
    async def test_get_token_renews_the_open_websockets_token_before_it_expires(self):
        owner = self.client("py-renew")
        sandbox = await self.sandbox(owner, name="renewal")
        asked = []

        async def fresh():
            asked.append(1)
            return token("py-renew", ttl=3)
        renewing = corral.AsyncCorral(ENV["url"], get_token=fresh, renew_before=1.5)
        self.addAsyncCleanup(renewing.close)
        result = await self.within(renewing.run(sandbox.id, "sleep 7; echo done"), 20, "the command")
        self.assertEqual((result.stdout, result.outcome.outcome), ("done\n", "exited"))
        self.assertGreaterEqual(renewing.connection.renewals, 3)
        self.assertEqual(renewing.connection.reconnects, 0, "one connection all along")
        self.assertGreaterEqual(len(asked), 4)

    async def test_a_fixed_tokens_connection_ends_at_its_expiry(self):
        owner = self.client("py-fixed")
        sandbox = await self.sandbox(owner, name="fixed")
        fixed = corral.AsyncCorral(ENV["url"], token("py-fixed", ttl=2),
                                   reconnect=corral.ReconnectOptions(give_up_after=1.5))
        self.addAsyncCleanup(fixed.close)
        with self.assertRaises(corral.CorralConnectionError):
            await self.within(fixed.run(sandbox.id, "sleep 6; echo done"), 20, "the command")
        self.assertEqual(fixed.connection.renewals, 0)

    async def test_a_renewal_with_another_users_token_is_forbidden_and_the_old_one_stays(self):
        users = ["py-renew-a"]
        c = corral.AsyncCorral(ENV["url"], get_token=lambda: token(users[0]))
        self.addAsyncCleanup(c.close)
        sandbox = await self.sandbox(self.client("py-renew-a"))
        self.assertEqual((await c.run(sandbox.id, "echo one")).stdout, "one\n")
        await c.renew_token()  # positive control: the same user
        self.assertEqual(c.connection.renewals, 1)
        users[0] = "py-renew-b"
        with self.assertRaises(corral.CorralError) as caught:
            await c.renew_token()
        self.assertEqual(caught.exception.code, "forbidden")
        self.assertEqual(c.connection.renewals, 1)
        command = await c.exec(sandbox.id, "echo still")  # the socket kept py-renew-a's token
        self.assertEqual(b"".join([chunk.data async for chunk in command]), b"still\n")
