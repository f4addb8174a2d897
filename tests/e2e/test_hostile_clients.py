"""What strangers and slow clients can make corrald hold (issue 16 §2 and §3), against a real
daemon: a request's token is checked on its headers, before any of its body is read; bodies being
read share one memory budget; every request has a deadline for its headers and a minimum rate for
its body. Each denial beside its control: an authenticated upload, a legitimate client."""
import json
import os
import socket
import threading
import time
import unittest

from corral_e2e import DaemonTestCase


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def read_response(sock, timeout=10):
    """The status line and headers of the first response on `sock` (b"" when it closed first)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


def status_of(response):
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0


class HostileClientsTest(DaemonTestCase):
    extra_api_config = 'handshake_timeout = 2\nbody_min_rate = "16K"\nmax_body_memory = "128M"\n'

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.daemon.port))
        self.addCleanup(sock.close)
        return sock

    def legit_latency(self):
        token = self.token("legit")
        started = time.monotonic()
        status, body = self.daemon.http("GET", "/v1/sandboxes", token)
        self.assertEqual(status, 200, body)
        return time.monotonic() - started

    def test_tokenless_bodies_are_not_read_and_memory_stays_flat(self):
        pid = self.daemon.proc.pid
        before = rss_kib(pid)
        sockets, statuses = [], []
        chunk = b"x" * (1 << 20)
        for _ in range(50):
            sock = self.connect()
            sock.sendall(b"PUT /v1/sandboxes/sb_x/fs/write?path=/tmp/x HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 60000000\r\n\r\n")
            try:
                sock.sendall(chunk)  # the daemon reads none of it: it answers and closes
            except OSError:
                pass
            sockets.append(sock)
        peak = rss_kib(pid)
        for sock in sockets:
            statuses.append(status_of(read_response(sock)))
        after = rss_kib(pid)
        print(f"\n  corrald VmRSS: {before} KiB before, {peak} KiB with 50 tokenless 60 MB bodies, {after} KiB after")
        self.assertTrue(all(s in (401, 0) for s in statuses), statuses)
        self.assertIn(401, statuses)
        self.assertLess(peak - before, 32 * 1024, "corrald grew by more than 32 MiB for strangers' bodies")
        self.assertLess(self.legit_latency(), 1.0)

    def test_authenticated_uploads_up_to_max_file_still_work(self):
        token = self.token("uploader")
        sandbox = self.create_sandbox(token)["id"]
        data = os.urandom(80 << 20)  # above api.max_body (64M), within streams.max_file (100M)
        status, body = self.daemon.http("PUT", f"/v1/sandboxes/{sandbox}/fs/write?path=/home/agent/big.bin",
                                        token, raw=data)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["size"], len(data))
        # Above streams.max_file: refused on its headers, before the body is sent.
        sock = self.connect()
        sock.sendall(f"PUT /v1/sandboxes/{sandbox}/fs/write?path=/home/agent/huge.bin HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: Bearer {token}\r\nContent-Length: {(100 << 20) + 1}\r\n\r\n".encode())
        response = read_response(sock)
        self.assertEqual(status_of(response), 413, response)
        self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox}", token)[0], 200)

    def test_bodies_beyond_the_memory_budget_get_503_with_retry_after(self):
        token = self.token("budget")
        # Two uploads hold 120 MiB of the 128 MiB while their bodies trickle in...
        holders = []
        for _ in range(2):
            sock = self.connect()
            sock.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
                         b"\r\nContent-Length: 62914560\r\n\r\n{")
            holders.append(sock)
        time.sleep(0.3)
        # ...so a third does not fit, at once and without its body being read.
        third = self.connect()
        third.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
                      b"\r\nContent-Length: 16777216\r\n\r\n")
        response = read_response(third)
        self.assertEqual(status_of(response), 503, response)
        self.assertIn(b"Retry-After: 1", response)
        # The control: a small body still fits beside them.
        status, body = self.daemon.http("POST", "/v1/sandboxes", token, {"start": False})
        self.assertEqual(status, 201, body)
        self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{body['id']}", token)[0], 200)
        for sock in holders:
            sock.close()

    def test_hundreds_of_stalled_requests_while_a_client_is_served_in_under_a_second(self):
        token = self.token("staller").encode()
        stalled = []
        for i in range(100):  # headers begun, never ended
            sock = self.connect()
            sock.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n")
            stalled.append(("header", sock))
        for i in range(100):  # a body begun, then silence
            sock = self.connect()
            sock.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
                         b"\r\nContent-Length: 1000\r\n\r\n{")
            stalled.append(("body", sock))
        for i in range(100):  # a second request on a keep-alive connection that stalls after a byte
            sock = self.connect()
            sock.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + b"\r\n\r\n")
            first = read_response(sock)
            self.assertEqual(status_of(first), 200, first)
            # The first response's body follows its headers: it is small; drain what came.
            sock.setblocking(False)
            try:
                while sock.recv(65536):
                    pass
            except BlockingIOError:
                pass
            sock.setblocking(True)
            sock.sendall(b"G")
            stalled.append(("second", sock))
        latencies = [self.legit_latency() for _ in range(10)]
        print(f"\n  legitimate requests beside 300 stalled connections: max {max(latencies) * 1000:.1f} ms")
        self.assertLess(max(latencies), 1.0)
        # Each stalled connection gets its 408 (or is closed) by its deadline: the header deadline
        # (2 s), not the idle timeout (300 s).
        started = time.monotonic()
        results = {}

        def finish(kind, sock):
            results.setdefault(kind, []).append(status_of(read_response(sock, timeout=15)))

        threads = [threading.Thread(target=finish, args=item) for item in stalled]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - started
        for kind in ("header", "body", "second"):
            self.assertEqual(len(results[kind]), 100)
            self.assertTrue(all(s == 408 for s in results[kind]), (kind, sorted(set(results[kind]))))
        self.assertLess(took, 10, "stalled requests were held past their deadline")


if __name__ == "__main__":
    unittest.main()
