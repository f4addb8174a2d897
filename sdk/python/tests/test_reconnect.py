"""Reconnection (the scenarios of sdk/typescript/test/reconnect.test.mjs): the client reaches
corrald through a TCP relay that the test cuts (every connection reset, as a network drop would).
The WebSocket is opened again and each stream attaches again from the last sequence number it
saw: a command's output arrives whole, in order, without duplicates; a session's events likewise.
A relay that stays down makes the streams fail with CorralConnectionError once the client gives
up; a fresh client through the relay afterwards is the control. A socket reset again while the
streams attach again leaves them to the next reconnect."""
import asyncio

import corral
from helpers import DaemonTest, ENV, ai_budget, play, scenario, token


class Relay:
    """A TCP relay to corrald that can cut every connection and refuse new ones."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.writers = set()
        self.accepting = True
        self.connections = 0
        self.cut_at_first_frame = False  # the next connection is reset when the client sends its first frame
        self.cut_at_frame = 0            # how many were

    async def listen(self):
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader, writer):
        if not self.accepting:
            writer.transport.abort()
            return
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers.update((writer, up_writer))
        cutting, self.cut_at_first_frame = self.cut_at_first_frame, False

        async def pipe(source, sink, upward=False):
            reads = 0
            try:
                while data := await source.read(65536):
                    reads += 1
                    # The client's first read is its upgrade request, the next its first frame.
                    if upward and cutting and reads == 2:
                        self.cut_at_frame += 1
                        writer.transport.abort()
                        up_writer.transport.abort()
                        return
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.transport.abort()
        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer))
        self.writers.difference_update((writer, up_writer))

    def cut(self):
        """Resets every connection (an RST, no close handshake)."""
        for writer in list(self.writers):
            writer.transport.abort()
        self.writers.clear()

    async def close(self):
        self.cut()
        self.server.close()
        await self.server.wait_closed()


class Reconnect(DaemonTest):
    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.direct = self.client("py-reconnect", {"budget": ai_budget()})
        self.box = await self.sandbox(self.direct, name="reconnect")
        self.relay = Relay(int(ENV["url"].rsplit(":", 1)[1]))
        self.relay_url = await self.relay.listen()
        self.addAsyncCleanup(self.relay.close)

    def relayed(self, **options):
        c = corral.AsyncCorral(self.relay_url, lambda: token("py-reconnect", budget=ai_budget()), **options)
        self.addAsyncCleanup(c.close)
        return c

    async def test_a_commands_output_survives_dropped_connections_all_of_it_in_order_once(self):
        c = self.relayed(reconnect=corral.ReconnectOptions(initial_delay=0.05))
        # 60 numbered lines over ~3 s, across three cuts.
        command = await c.exec(self.box.id, "i=1; while [ $i -le 60 ]; do echo line$i; i=$((i+1)); sleep 0.05; done")
        chunks = []

        async def read():
            async for chunk in command:
                chunks.append(chunk)
        reading = asyncio.ensure_future(read())
        for _ in range(3):
            await asyncio.sleep(0.6)
            self.relay.cut()
        await self.within(reading, 30, "the output")
        self.assertEqual((await command.wait()).exit_code, 0)
        self.assertGreaterEqual(c.connection.reconnects, 3)
        text = b"".join(ch.data for ch in chunks).decode()
        self.assertEqual(text.split(), [f"line{i}" for i in range(1, 61)])
        seqs = [ch.seq for ch in chunks]
        self.assertEqual(seqs, sorted(set(seqs)), "in order, none twice")
        self.assertEqual(command.gaps, [])

    async def test_a_connection_dropped_again_while_streams_attach_again_is_left_to_the_next_reconnect(self):
        c = self.relayed(reconnect=corral.ReconnectOptions(initial_delay=0.05))
        command = await c.exec(self.box.id, "i=1; while [ $i -le 40 ]; do echo line$i; i=$((i+1)); sleep 0.05; done")
        chunks = []

        async def read():
            async for chunk in command:
                chunks.append(chunk)
        reading = asyncio.ensure_future(read())
        await asyncio.sleep(0.5)
        self.relay.cut_at_first_frame = True  # the reconnected socket is reset as the command attaches again
        self.relay.cut()
        await self.within(reading, 30, "the output")
        self.assertEqual(self.relay.cut_at_frame, 1, "the re-attach was cut")
        self.assertGreaterEqual(c.connection.reconnects, 2)
        self.assertEqual((await command.wait()).exit_code, 0)
        text = b"".join(ch.data for ch in chunks).decode()
        self.assertEqual(text.split(), [f"line{i}" for i in range(1, 41)])

    async def test_a_sessions_events_survive_a_dropped_connection_numbered_without_a_hole(self):
        play(scenario("reconnect_session"))
        c = self.relayed(reconnect=corral.ReconnectOptions(initial_delay=0.05))
        session = await c.create_session(self.box.id, prompt="do it slowly")
        await asyncio.sleep(1.5)
        self.relay.cut()
        result = await self.within(session.result(), 120, "the result after a cut")
        self.assertEqual(result.text, "all done")
        self.assertGreaterEqual(c.connection.reconnects, 1)
        self.assertEqual([e.seq for e in session.history], list(range(1, len(session.history) + 1)))
        await session.abort()
        await self.within(session.wait(), 60, "the abort")

    async def test_when_corrald_stays_unreachable_the_streams_fail_and_a_fresh_client_works(self):
        c = self.relayed(reconnect=corral.ReconnectOptions(initial_delay=0.05, max_delay=0.1, give_up_after=0.7))
        command = await c.exec(self.box.id, ["sleep", "30"])
        self.relay.accepting = False
        self.relay.cut()
        with self.assertRaisesRegex(corral.CorralConnectionError, "gave up"):
            await self.within(command.wait(), 10, "giving up")
        with self.assertRaises(corral.CorralConnectionError):
            async for _ in command:
                pass
        self.relay.accepting = True
        # Control: a fresh client through the same relay works again.
        self.assertEqual((await self.relayed().run(self.box.id, ["echo", "back"])).stdout, "back\n")
        await self.direct.run(self.box.id, ["pkill", "-x", "sleep"])

    async def test_output_the_daemon_dropped_while_the_client_was_away_is_listed_in_gaps(self):
        # With no connection attached, the replay buffer (1 MiB) drops the oldest output: the
        # client that comes back gets stream_gap, lists what it missed in `gaps` and follows on
        # from what is still held, to the last line.
        c = self.relayed(reconnect=corral.ReconnectOptions(initial_delay=0.05, max_delay=0.2, give_up_after=60))
        command = await c.exec(self.box.id, "sleep 1; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end")
        self.relay.accepting = False
        self.relay.cut()
        for _ in range(200):
            if (await self.direct.get_command(self.box.id, command.id))["state"] == "exited":
                break
            await asyncio.sleep(0.1)
        self.relay.accepting = True
        data = b"".join([chunk.data async for chunk in command])
        self.assertEqual((await command.wait()).exit_code, 0)
        self.assertTrue(data.endswith(b"x\nend\n"), data[-20:])
        self.assertLess(len(data), 3000000, "the start was dropped")
        self.assertEqual(len(command.gaps), 1, command.gaps)
        self.assertEqual(command.gaps[0].first, 1)
        self.assertGreater(command.gaps[0].last, 1)

    async def test_attach_from_a_dropped_seq_is_a_stream_gap_with_what_is_held(self):
        c = self.client("py-reconnect")
        command = await c.exec(self.box.id, "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end")
        await command.detach()
        record = {}
        for _ in range(100):
            record = await c.get_command(self.box.id, command.id)
            if record["state"] == "exited":
                break
            await asyncio.sleep(0.1)
        self.assertEqual(record["state"], "exited")
        with self.assertRaises(corral.CorralError) as caught:
            await c.attach(command.id, 0)
        self.assertEqual(caught.exception.code, "stream_gap")
        first = caught.exception.details["first_seq"]
        self.assertGreater(first, 1)
        # Control: from what is still held, the rest arrives, ending with the last line.
        again = await c.attach(command.id, first - 1)
        self.assertEqual((again.first_seq, again.state), (first, "exited"))
        tail = b"".join([chunk.data async for chunk in again])
        self.assertTrue(tail.endswith(b"\nend\n"), tail[-20:])
        self.assertEqual((await again.wait()).exit_code, 0)
