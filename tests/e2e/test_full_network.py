"""corrald end to end: "full network" sandboxes, routed and NATed through a router namespace.

A sandbox created with `"network": "full"` (and `"unsafe": ["full_network"]`, which only a token
with the scope `unsafe:full_network` may ask for) gets `eth0`, one end of a veth pair whose other
end, `crl<N>`, corrald puts in the namespace `network.netns` with an nftables table
`inet corral_<id>` that forwards and masquerades the sandbox's traffic to public addresses and
refuses everything else. Every other sandbox keeps only `lo`.

The network is this test's own (nothing reaches the machine's real network):

    sandbox --veth--> router (tests/fixtures/fake_internet.py Router: network.netns)
                        --veth--> fake internet (FakeInternet: 203.0.113.10/.11 public web
                                  servers, 10.77.0.5 private, 169.254.169.254 metadata,
                                  203.0.113.53 and 10.77.0.53 DNS, a port listener on all)

The fake internet routes the sandboxes' subnet back to the router (return_routes), so a packet
that corrald forgot to masquerade still gets its answer and the test can say "not NATed" instead
of timing out. Each denial has its positive control beside it, and what arrived is read from the
far end's own logs (the web servers', the DNS server's query counts, the port listeners'), not
only from the client's error. Refusals must be quick (ICMP admin-prohibited): a client that
waited for its timeout would pass a "does not connect" test, so the time is asserted too.

The same daemon serves every test of the class (set up once, like the other e2e suites); its
config adds [network] with the router and [egress] allowed_cidrs (what rules may name).
"""
import asyncio
import ipaddress
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import unittest

from corral_e2e import DaemonTestCase, WsClient, init_pids, process_gone, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from fake_internet import (FakeInternet, METADATA_ADDRESS, NETNS_DNS_ADDRESS,  # noqa: E402
                           OTHER_PUBLIC_ADDRESS, PRIVATE_ADDRESS, PUBLIC_ADDRESS)

FULL_SUBNET = "10.231.0.0/16"
FULL_SCOPES = ["sandboxes", "exec", "terminal", "files", "sessions", "unsafe:full_network"]
FULL = {"network": "full", "unsafe": ["full_network"]}
# A second nameserver of network.dns, private: the filter lets port 53 through to it, nothing else.
PRIVATE_DNS_ADDRESS = "10.77.0.53"
# A DNS server (the same fake one) at a private address network.dns does NOT name.
UNLISTED_DNS_ADDRESS = "10.77.0.54"
# More hosts of the fake internet, one per range the filter refuses (the fixture's own four cover
# 10/8 and the metadata server), each reached through the port listener.
REFUSED_RANGE_HOSTS = {"172.16/12": "172.16.0.5", "192.168/16": "192.168.0.5",
                       "100.64/10": "100.64.0.5", "169.254/16": "169.254.1.5",
                       "10/8": PRIVATE_ADDRESS}
LISTENER_PORT = 7070  # the port listener's, in the fake internet and in the router
SERVICE_PORT = 8000   # a sandbox's own service, in the two-sandbox test
FAST = 3.0  # seconds: a refusal takes less (curl's and the probes' timeouts are 5 s)
IP = "/usr/sbin/ip"

# Run inside a sandbox: one TCP connection or one UDP exchange; prints a JSON line with ok,
# reply, errno (its name, "timeout" for a timeout), error and seconds.
#   argv: tcp|udp HOST PORT TIMEOUT [PAYLOAD [SOURCE]]
# SOURCE binds the socket to an address that is not the sandbox's (IP_TRANSPARENT, which needs
# CAP_NET_ADMIN over the network namespace: only the test, from outside, has it).
PROBE = r"""
import errno, json, socket, sys, time
proto, host, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
payload = (sys.argv[5] if len(sys.argv) > 5 else "probe").encode()
source = sys.argv[6] if len(sys.argv) > 6 else ""
kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
result = {"ok": False, "reply": "", "errno": None, "error": ""}
started = time.monotonic()
try:
    family, _, _, _, address = socket.getaddrinfo(host, port, 0, kind)[0]
    with socket.socket(family, kind) as s:
        s.settimeout(timeout)
        if source:
            s.setsockopt(socket.IPPROTO_IP, 19, 1)  # IP_TRANSPARENT
            s.bind((source, 0))
        s.connect(address)  # UDP too: an ICMP error then fails the recv
        if proto == "udp":
            s.send(payload)
        result["reply"] = s.recv(200).decode(errors="replace")
        result["ok"] = True
except socket.timeout as e:
    result["errno"], result["error"] = "timeout", str(e)
except OSError as e:
    result["errno"] = errno.errorcode.get(e.errno, str(e.errno))
    result["error"] = str(e)
result["seconds"] = round(time.monotonic() - started, 3)
print(json.dumps(result))
"""

# Run inside a sandbox: a TCP service on 0.0.0.0:PORT that answers "service NAME" and appends
# each client's address to ~/peers. Prints "ready"; ends after two minutes at most.
SERVICE = r"""
import os, select, socket, sys, time
name, port = sys.argv[1], int(sys.argv[2])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen(16)
print("ready", flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if select.select([s], [], [], 1)[0]:
        c, peer = s.accept()
        with open(os.path.expanduser("~/peers"), "a") as f:
            f.write(peer[0] + "\n")
        c.sendall(("service %s\n" % name).encode())
        c.close()
"""

# Run inside a sandbox (as the agent and as root): every way to change the network, and raw
# sockets. Prints one line per attempt: "NAME rc=N LAST LINE OF ITS OUTPUT".
RECONFIGURE = r"""
attempt() { name=$1; shift; out=$("$@" 2>&1); rc=$?; echo "$name rc=$rc $(echo "$out" | tail -n 1)"; }
attempt addr /usr/sbin/ip addr add 10.231.255.250/30 dev eth0
attempt link-down /usr/sbin/ip link set eth0 down
attempt mtu /usr/sbin/ip link set eth0 mtu 1280
attempt route /usr/sbin/ip route add 198.18.0.0/15 dev eth0
attempt default /usr/sbin/ip route replace default dev eth0
attempt lo-down /usr/sbin/ip link set lo down
attempt raw-icmp python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'
attempt raw-packet python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)'
"""
RECONFIGURE_ATTEMPTS = ("addr", "link-down", "mtu", "route", "default", "lo-down", "raw-icmp",
                        "raw-packet")


def run_checked(argv):
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError("%s: exit %d: %s" % (" ".join(argv), result.returncode, result.stderr))
    return result.stdout


class FullNetwork(DaemonTestCase):
    inet = None
    router = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the fake internet and corrald need root")
        cls.inet = FakeInternet().start()
        try:
            cls.router = cls.inet.add_router(return_routes=[FULL_SUBNET])
            for address in list(REFUSED_RANGE_HOSTS.values()) + [PRIVATE_DNS_ADDRESS,
                                                                  UNLISTED_DNS_ADDRESS]:
                if address != PRIVATE_ADDRESS:
                    run_checked(["ip", "-n", cls.inet.netns_name, "addr", "add", address + "/32",
                                 "dev", "inet0"])
            cls.inet.dns.listen_in_netns(cls.inet.netns_path, PRIVATE_DNS_ADDRESS, 53)
            cls.inet.dns.listen_in_netns(cls.inet.netns_path, UNLISTED_DNS_ADDRESS, 53)
            cls.listener = cls.inet.listen(LISTENER_PORT)
            cls.router_listener = cls.router.listen(LISTENER_PORT)
            # [network] and [egress] after the [sandbox] keys of the daemon's config.
            cls.extra_config = f"""
[network]
netns = "{cls.router.netns_path}"
full_subnet = "{FULL_SUBNET}"
dns = ["{NETNS_DNS_ADDRESS}", "{PRIVATE_DNS_ADDRESS}"]

[egress]
allowed_cidrs = ["10.77.0.0/16", "169.254.0.0/16"]
"""
            super().setUpClass()
        except BaseException:
            cls.inet.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        # Every test destroyed its sandboxes (addCleanup): the router must hold nothing of them.
        # Looked at while the daemon still runs (its cleanup would kill what is left).
        # A veth goes with its sandbox's namespace, which the kernel frees in the background.
        def left():
            return ([link["ifname"] for link in cls.router_links()
                     if link["ifname"].startswith("crl") or link.get("ifalias", "").startswith("corral:")]
                    + [name for name in cls.router_tables() if name.startswith("corral_")])
        leaked = []
        try:
            deadline = time.time() + 10
            while (leaked := left()) and time.time() < deadline:
                time.sleep(0.1)
        finally:
            try:
                super().tearDownClass()
            finally:
                cls.inet.stop()
        assert not leaked, f"left in the router namespace after every sandbox was destroyed: {leaked}"

    def setUp(self):
        # A test that failed half way may have left the daemon down (the recovery test kills it).
        if self.daemon.proc.poll() is not None:
            self.daemon.start()

    # --- the router's side ---

    @classmethod
    def router_links(cls):
        """The router namespace's links, as `ip -j link` shows them (ifname, ifalias, ...)."""
        return json.loads(run_checked(["ip", "-n", cls.router.netns_name, "-j", "link", "show"]))

    @classmethod
    def router_tables(cls):
        """Names of the router namespace's nftables tables (any family)."""
        out = cls.router.run(["nft", "-j", "list", "tables"], capture_output=True, text=True)
        if out.returncode != 0:
            raise AssertionError("nft list tables: " + out.stderr)
        return [item["table"]["name"] for item in json.loads(out.stdout)["nftables"] if "table" in item]

    def links_of(self, sid):
        return [link for link in self.router_links() if link.get("ifalias") == f"corral:{sid}"]

    def assert_router_holds_nothing_of(self, sid, interface=None):
        """No link with the sandbox's ifalias (or named `interface`), no table corral_<id>. A veth
        goes with its sandbox's namespace, which the kernel frees in the background: polled."""
        def clean():
            links = self.links_of(sid) + [l for l in self.router_links() if l["ifname"] == interface]
            return not links and f"corral_{sid}" not in self.router_tables()
        try:
            wait_until(clean, 10, interval=0.1, what=f"the router to hold nothing of {sid}")
        except AssertionError:
            self.fail(f"left of {sid}: links {[l['ifname'] for l in self.links_of(sid)]} "
                      f"(all: {[l['ifname'] for l in self.router_links()]}), tables {self.router_tables()}")

    # --- sandboxes ---

    def full_token(self, sub):
        return self.token(sub, scope=FULL_SCOPES)

    def sandbox(self, sub, egress=None, network="full", token=None):
        """A running sandbox (destroyed after the test): (token, id, the sandbox object)."""
        token = token or self.full_token(sub)
        body = dict(FULL) if network == "full" else ({"network": network} if network else {})
        if egress is not None:
            body["egress"] = egress
        sandbox = self.create_sandbox(token, **body)
        sid = sandbox["id"]
        self.destroy_later(token, sid)
        return token, sid, sandbox

    def destroy_later(self, token, sid):
        """Destroys the sandbox after the test, with a daemon started again if the test left it
        down (so that its network goes as the daemon removes it, not with the class's cleanup)."""
        def destroy():
            if self.daemon.proc.poll() is not None:
                self.daemon.start()
            self.daemon.http("DELETE", f"/v1/sandboxes/{sid}", token)
        self.addCleanup(destroy)

    def run_in(self, token, sid, argv, user=None):
        """(stdout, stderr, outcome) of one command in the sandbox."""
        async def go():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                fields = {"user": user} if user else {}
                return await client.run(sid, argv, **fields)
            finally:
                await client.close()

        out, err, outcome, _ = self.run_async(go())
        return out.decode(errors="replace"), err.decode(errors="replace"), outcome

    def sh(self, token, sid, script, user=None):
        out, err, outcome = self.run_in(token, sid, ["sh", "-c", script], user)
        self.assertEqual(outcome.get("exit_code"), 0, (script, out, err, outcome))
        return out

    def curl(self, token, sid, url):
        """curl in the sandbox, straight (no proxy): (exit code, body, stderr, seconds)."""
        started = time.monotonic()
        out, err, outcome = self.run_in(token, sid, ["curl", "-sS", "--noproxy", "*", "--max-time", "5", url])
        return outcome.get("exit_code"), out, err, time.monotonic() - started

    def assert_served(self, token, sid, address, port=80):
        code, body, err, _ = self.curl(token, sid, f"http://{address}:{port}/whoami")
        self.assertEqual((code, body), (0, f"served-by {address}\n"), err)

    def assert_refused_fast(self, token, sid, address, port=80):
        """curl fails to connect (exit 7), well before its 5 s timeout."""
        code, body, err, seconds = self.curl(token, sid, f"http://{address}:{port}/whoami")
        self.assertEqual(code, 7, f"curl {address}: exit {code}, {body!r} {err!r}")
        self.assertLess(seconds, FAST, f"curl {address} took {seconds:.1f} s to fail: dropped, not refused? {err}")
        self.assertNotIn("served-by", body)

    def assert_listener_refused_fast(self, token, sid, host):
        """A TCP connection to the fake internet's port listener on `host` fails quickly, and
        the listener saw nothing."""
        seen_before = len(self.listener.entries())
        result = self.probe(token, sid, "tcp", host, LISTENER_PORT)
        self.assertFalse(result["ok"], result)
        self.assertLess(result["seconds"], FAST, result)
        self.assertEqual([e for e in self.listener.entries()[seen_before:] if e["local"].startswith(host + ":")], [])

    def probe(self, token, sid, proto, host, port, timeout=5, payload="probe"):
        out, err, outcome = self.run_in(token, sid, ["python3", "-c", PROBE, proto, host, str(port),
                                                     str(timeout), payload])
        self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome))
        return json.loads(out)

    def probe_from_outside(self, sid, proto, host, port, timeout=5, payload="probe", source=None):
        """PROBE run by this test (host root) in the sandbox's network namespace only, entered
        through its init's /proc/PID/ns/net: it can do what nothing inside the sandbox may."""
        (init_pid,) = init_pids(self.daemon, sid)
        argv = ["nsenter", f"--net=/proc/{init_pid}/ns/net", "/usr/bin/python3", "-c", PROBE, proto, host,
                str(port), str(timeout), payload] + ([source] if source else [])
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 0, (result.stdout, result.stderr))
        return json.loads(result.stdout)

    def addresses(self, token, sid):
        """{interface: [(family, "ADDRESS/PREFIX", flags)]} inside the sandbox."""
        links = json.loads(self.sh(token, sid, f"{IP} -j addr show"))
        return {link["ifname"]: [(a["family"], f"{a['local']}/{a['prefixlen']}",
                                  tuple(k for k in ("tentative", "dadfailed") if a.get(k)))
                                 for a in link.get("addr_info", [])]
                for link in links}

    def eth0(self, token, sid):
        """The sandbox's eth0 IPv4 address and its default gateway, as seen inside."""
        inet = [a for family, a, _ in self.addresses(token, sid).get("eth0", []) if family == "inet"]
        self.assertEqual(len(inet), 1, self.addresses(token, sid))
        routes = json.loads(self.sh(token, sid, f"{IP} -j -4 route show default"))
        self.assertEqual(len(routes), 1, routes)
        self.assertEqual(routes[0].get("dev"), "eth0", routes)
        return ipaddress.ip_interface(inet[0]), routes[0].get("gateway")

    def network_events(self, token, sid):
        status, page = self.daemon.http("GET", f"/v1/sandboxes/{sid}/events?type=network", token)
        self.assertEqual(status, 200, page)
        return [e["data"] for e in page["events"]]

    def assert_attached(self, token, sid, events_before=0):
        """The sandbox's eth0, its newest "network" event and the router's side agree; returns
        (address, gateway, interface)."""
        address, gateway = self.eth0(token, sid)
        self.assertEqual(address.network.prefixlen, 30)
        self.assertTrue(address.network.subnet_of(ipaddress.ip_network(FULL_SUBNET)), address)
        self.assertEqual(address.ip, address.network.network_address + 2)
        self.assertEqual(gateway, str(address.network.network_address + 1))
        events = self.network_events(token, sid)
        self.assertEqual(len(events), events_before + 1, events)
        event = events[-1]
        self.assertLessEqual({"mode", "address", "gateway", "interface"}, set(event), event)
        self.assertEqual((event["mode"], event["address"], event["gateway"]), ("full", str(address.ip), gateway))
        self.assertRegex(event["interface"], r"^crl\d+$")
        links = self.links_of(sid)
        self.assertEqual([l["ifname"] for l in links], [event["interface"]], self.router_links())
        self.assertIn(f"corral_{sid}", self.router_tables())
        # The router's end has the gateway address.
        router_side = json.loads(run_checked(["ip", "-n", self.router.netns_name, "-j", "-4", "addr", "show",
                                              "dev", event["interface"]]))
        self.assertEqual([f"{a['local']}/{a['prefixlen']}" for a in router_side[0]["addr_info"]],
                         [f"{gateway}/30"])
        return str(address.ip), gateway, event["interface"]

    # --- 1. the way out, and the default ---

    def test_full_network_has_eth0_an_event_and_reaches_the_internet_through_nat(self):
        token, sid, sandbox = self.sandbox("full")
        self.assertEqual(sandbox["network"], "full")
        status, got = self.daemon.http("GET", f"/v1/sandboxes/{sid}", token)
        self.assertEqual((status, got["network"]), (200, "full"))
        self.assertEqual(sorted(self.addresses(token, sid)), ["eth0", "lo"])
        address, _, _ = self.assert_attached(token, sid)
        before = len(self.inet.connections(PUBLIC_ADDRESS))
        self.assert_served(token, sid, PUBLIC_ADDRESS)
        # The fake internet saw the router's address: masqueraded, not the sandbox's own.
        clients = [c["client"].rsplit(":", 1)[0] for c in self.inet.connections(PUBLIC_ADDRESS)[before:]]
        self.assertEqual(clients, [self.router.uplink_address], f"the sandbox is {address}")
        # Any port of a public address: the listener, over TCP and UDP.
        for proto in ("tcp", "udp"):
            result = self.probe(token, sid, proto, OTHER_PUBLIC_ADDRESS, LISTENER_PORT, payload="hi-" + sid)
            self.assertTrue(result["ok"], (proto, result))
        self.assertEqual(self.listener.wait_for(lambda e: e.get("data") == "hi-" + sid)["client"].rsplit(":", 1)[0],
                         self.router.uplink_address)

    def test_loopback_is_the_default_and_has_no_way_out(self):
        token = self.full_token("quiet")  # even a token that may ask for more
        for body in ({}, {"network": "loopback"}):
            with self.subTest(body=body):
                sandbox = self.create_sandbox(token, **body)
                sid = sandbox["id"]
                self.destroy_later(token, sid)
                self.assertEqual(sandbox["network"], "loopback")
                self.assertEqual(list(self.addresses(token, sid)), ["lo"])
                self.assertEqual(self.network_events(token, sid), [])
                self.assertEqual(self.links_of(sid), [])
                self.assertNotIn(f"corral_{sid}", self.router_tables())
        before = len(self.inet.connections(PUBLIC_ADDRESS))
        code, body, err, _ = self.curl(token, sid, f"http://{PUBLIC_ADDRESS}/whoami")
        self.assertEqual(code, 7, (body, err))
        self.assertIn("Network is unreachable", self.probe(token, sid, "tcp", PUBLIC_ADDRESS, 80)["error"])
        self.assertEqual(len(self.inet.connections(PUBLIC_ADDRESS)), before)
        # Positive control, in the same daemon: a full-network sandbox gets there.
        full_token, full_sid, _ = self.sandbox("loud")
        self.assert_served(full_token, full_sid, PUBLIC_ADDRESS)

    # --- 2. what is refused, and egress CIDRs that open it ---

    def test_private_ranges_and_the_metadata_server_are_refused_fast(self):
        token, sid, _ = self.sandbox("private")
        private_before = len(self.inet.connections(PRIVATE_ADDRESS))
        metadata_before = len(self.inet.connections(METADATA_ADDRESS))
        self.assert_refused_fast(token, sid, PRIVATE_ADDRESS)
        self.assert_refused_fast(token, sid, METADATA_ADDRESS)
        self.assertEqual(len(self.inet.connections(PRIVATE_ADDRESS)), private_before)
        self.assertEqual(len(self.inet.connections(METADATA_ADDRESS)), metadata_before)
        # One host per refused range, on a port that is not HTTP's, over TCP and UDP (the
        # router's ICMP answers are rate-limited: a UDP probe may time out instead, so only TCP's
        # time is asserted).
        tag = secrets.token_hex(4)
        seen_before = len(self.listener.entries())
        for name, host in REFUSED_RANGE_HOSTS.items():
            with self.subTest(range=name):
                result = self.probe(token, sid, "tcp", host, LISTENER_PORT)
                self.assertFalse(result["ok"], result)
                self.assertLess(result["seconds"], FAST, result)
                result = self.probe(token, sid, "udp", host, LISTENER_PORT, timeout=1, payload=f"{tag}-{host}")
                self.assertFalse(result["ok"], result)
        # Positive control: the same port of a public address, both ways.
        result = self.probe(token, sid, "tcp", PUBLIC_ADDRESS, LISTENER_PORT)
        self.assertEqual((result["ok"], result["reply"]), (True, f"hello from {LISTENER_PORT}\n"), result)
        result = self.probe(token, sid, "udp", PUBLIC_ADDRESS, LISTENER_PORT, payload=f"{tag}-public")
        self.assertEqual((result["ok"], result["reply"]), (True, f"echo {tag}-public"), result)
        self.assertIsNotNone(self.listener.wait_for(lambda e: e.get("data") == f"{tag}-public"))
        arrived = [e["local"] for e in self.listener.entries()[seen_before:]
                   if e["local"].split(":")[0] in REFUSED_RANGE_HOSTS.values()]
        self.assertEqual(arrived, [], "the listener saw these refused hosts")
        self.assertEqual(len(self.inet.connections(PRIVATE_ADDRESS)), private_before)

    def test_an_egress_cidr_opens_one_private_host_and_not_the_metadata_server(self):
        token, sid, sandbox = self.sandbox("mirror", egress={"cidrs": ["10.77.0.5/32"]})
        self.assertEqual(sandbox["egress"]["cidrs"], ["10.77.0.5/32"])
        self.assert_served(token, sid, PRIVATE_ADDRESS)
        self.assert_refused_fast(token, sid, METADATA_ADDRESS)
        # The range names one host: its neighbour on the same network is still refused.
        self.assert_listener_refused_fast(token, sid, PRIVATE_DNS_ADDRESS)

    def test_egress_cidrs_changed_at_runtime_apply_to_the_next_connection(self):
        token, sid, _ = self.sandbox("runtime")
        self.assert_refused_fast(token, sid, PRIVATE_ADDRESS)
        status, rules = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/egress", token, {"cidrs": ["10.77.0.5/32"]})
        self.assertEqual((status, rules.get("cidrs")), (200, ["10.77.0.5/32"]), rules)
        self.assert_served(token, sid, PRIVATE_ADDRESS)
        self.assert_refused_fast(token, sid, METADATA_ADDRESS)
        status, rules = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/egress", token, {"cidrs": []})
        self.assertEqual(status, 200, rules)
        self.assert_refused_fast(token, sid, PRIVATE_ADDRESS)
        self.assert_served(token, sid, PUBLIC_ADDRESS)  # the rest of the way out is untouched

    # --- 3. names ---

    def test_names_resolve_through_the_configured_dns_and_only_port_53_of_it(self):
        token, sid, _ = self.sandbox("names")
        resolv = self.sh(token, sid, "cat /etc/resolv.conf")
        nameservers = [line.split()[1] for line in resolv.splitlines() if line.startswith("nameserver")]
        self.assertEqual(nameservers, [NETNS_DNS_ADDRESS, PRIVATE_DNS_ADDRESS], resolv)
        dns = self.inet.dns
        before = dns.query_count("example.test", "A")
        out, err, outcome = self.run_in(token, sid, ["getent", "hosts", "example.test"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, err))
        self.assertEqual(out.split(), [PUBLIC_ADDRESS, "example.test"])
        self.assertGreater(dns.query_count("example.test", "A"), before)  # it was asked, not a file
        code, body, err, _ = self.curl(token, sid, "http://other.test/whoami")
        self.assertEqual((code, body), (0, f"served-by {OTHER_PUBLIC_ADDRESS}\n"), err)
        # The private nameserver answers on port 53 (UDP and TCP), and on nothing else.
        for proto in ("udp", "tcp"):
            name = f"{proto}-{secrets.token_hex(4)}.test"
            dns.set_record(name, OTHER_PUBLIC_ADDRESS)
            self.assertEqual(self.query(token, sid, PRIVATE_DNS_ADDRESS, name, proto), OTHER_PUBLIC_ADDRESS)
        self.assert_listener_refused_fast(token, sid, PRIVATE_DNS_ADDRESS)
        # A private DNS server that network.dns does not name: nothing arrives.
        name = f"unlisted-{secrets.token_hex(4)}.test"
        dns.set_record(name, OTHER_PUBLIC_ADDRESS)
        self.assertIsNone(self.query(token, sid, UNLISTED_DNS_ADDRESS, name, "udp"))
        self.assertEqual(dns.query_count(name), 0, dns.queries()[-5:])

    def query(self, token, sid, server, name, proto):
        """One A query from inside the sandbox (a few lines of Python, no resolver library):
        the first address of the answer, or None when no answer came."""
        script = r"""
import socket, struct, sys
server, name, proto = sys.argv[1:4]
q = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
try:
    if proto == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.connect((server, 53))
        s.send(q); r = s.recv(512)
    else:
        s = socket.create_connection((server, 53), timeout=3); s.sendall(struct.pack("!H", len(q)) + q)
        r = s.recv(2); r = s.recv(struct.unpack("!H", r)[0])
except OSError as e:
    print("none", e); sys.exit(0)
print(socket.inet_ntoa(r[-4:]) if struct.unpack("!H", r[6:8])[0] else "empty")
"""
        out, err, outcome = self.run_in(token, sid, ["python3", "-c", script, server, name, proto])
        self.assertEqual(outcome.get("exit_code"), 0, (out, err))
        return None if out.startswith("none") else out.strip()

    # --- 4. the router itself ---

    def test_the_router_and_the_gateway_are_unreachable_from_the_sandbox(self):
        token, sid, _ = self.sandbox("router")
        address, gateway, interface = self.assert_attached(token, sid)
        # Positive control: the listener answers on both addresses from inside the router.
        for target in (gateway, self.router.uplink_address):
            r = self.router.run(["/usr/bin/python3", "-c", PROBE, "tcp", target, str(LISTENER_PORT), "5"],
                                capture_output=True, text=True, timeout=30)
            self.assertTrue(json.loads(r.stdout)["ok"], (target, r.stdout, r.stderr))
            self.assertIsNotNone(self.router_listener.wait_for(lambda e, t=target: e["local"] == f"{t}:{LISTENER_PORT}"))
        seen_before = len(self.router_listener.entries())
        for proto, target in (("tcp", gateway), ("udp", gateway), ("tcp", self.router.uplink_address),
                              ("udp", self.router.uplink_address)):
            with self.subTest(proto=proto, target=target):
                result = self.probe(token, sid, proto, target, LISTENER_PORT, timeout=2, payload="to-router")
                self.assertFalse(result["ok"], result)
        self.assertEqual(self.router_listener.entries()[seen_before:], [],
                         f"the router's listener was reached from the sandbox ({address})")
        # IPv6: no route out, and the router's link-local address is not reachable either.
        routes6 = json.loads(self.sh(token, sid, f"{IP} -j -6 route show"))
        self.assertEqual([r for r in routes6 if r.get("dst") == "default"], [], routes6)
        self.assert_ipv6_to_router_dropped(token, sid, interface)
        # Positive control: the sandbox is otherwise online.
        self.assert_served(token, sid, PUBLIC_ADDRESS)

    def assert_ipv6_to_router_dropped(self, token, sid, interface):
        def link_local(addresses):
            return [(a, flags) for family, a, flags in addresses if family == "inet6" and a.startswith("fe80:")]

        def router_link_local():
            shown = json.loads(run_checked(["ip", "-n", self.router.netns_name, "-j", "-6", "addr", "show",
                                            "dev", interface]))
            return link_local([(a["family"], f"{a['local']}/{a['prefixlen']}",
                                tuple(k for k in ("tentative", "dadfailed") if a.get(k)))
                               for a in (shown[0].get("addr_info", []) if shown else [])])
        mine, theirs = link_local(self.addresses(token, sid).get("eth0", [])), router_link_local()
        if not mine or not theirs:
            # IPv6 is off on the veth (no link-local address): nothing can be sent to the router.
            self.assertEqual([a for family, a, _ in self.addresses(token, sid)["eth0"] if family == "inet6"
                              and not a.startswith("fe80:")], [])
            return
        # Both link-local addresses usable (duplicate address detection done), so a failure below
        # is the filter's doing, not a tentative address's.
        wait_until(lambda: not any(f for _, f in link_local(self.addresses(token, sid)["eth0"]) + router_link_local()),
                   10, interval=0.2, what="IPv6 duplicate address detection")
        target = theirs[0][0].split("/")[0] + "%eth0"
        before = len(self.router_listener.entries())
        result = self.probe(token, sid, "tcp", target, LISTENER_PORT, timeout=2)
        self.assertFalse(result["ok"], result)
        self.assertEqual([e for e in self.router_listener.entries()[before:] if e["client"].startswith("fe80")], [])

    # --- 5. sandboxes and each other ---

    def test_two_full_network_sandboxes_cannot_reach_each_other(self):
        a_token, a, _ = self.sandbox("neighbour-a")
        b_token, b, _ = self.sandbox("neighbour-b")
        a_address, a_gateway, _ = self.assert_attached(a_token, a)
        b_address, b_gateway, _ = self.assert_attached(b_token, b)
        self.assertNotEqual(a_address, b_address)

        async def with_services():
            clients = []
            try:
                for token, sid, name in ((a_token, a, "a"), (b_token, b, "b")):
                    client = await WsClient.connect(self.daemon.ws_url(), token)
                    clients.append(client)
                    reply = await client.request("exec", sandbox=sid,
                                                 argv=["python3", "-c", SERVICE, name, str(SERVICE_PORT)])
                    self.assertTrue(reply["ok"], reply)
                    output = b""
                    while b"ready" not in output:
                        event = await client.next_event(15)
                        self.assertNotEqual(event.get("event"), "exit", (event, output))
                        if event.get("event") == "output":
                            output += event["data"]
                return await asyncio.to_thread(probes)
            finally:
                for client in clients:
                    await client.close()

        def probes():
            results = {}
            for token, sid, own, other in ((a_token, a, a_address, b_address), (b_token, b, b_address, a_address)):
                for target in ("127.0.0.1", own, other):
                    results[(sid, target)] = self.probe(token, sid, "tcp", target, SERVICE_PORT)
            return results

        results = self.run_async(with_services())
        for token, sid, name, own, other in ((a_token, a, "a", a_address, b_address),
                                             (b_token, b, "b", b_address, a_address)):
            with self.subTest(sandbox=name):
                # Positive control: each reaches its own service, on loopback and on eth0.
                for target in ("127.0.0.1", own):
                    self.assertEqual(results[(sid, target)]["reply"], f"service {name}\n", results[(sid, target)])
                refused = results[(sid, other)]
                self.assertFalse(refused["ok"], refused)
                self.assertLess(refused["seconds"], FAST, refused)
                peers = self.sh(token, sid, "cat ~/peers").split()
                self.assertEqual(sorted(set(peers)), sorted({"127.0.0.1", own}), "who reached the service")

    # --- 6. who may ask ---

    def test_full_network_needs_the_unsafe_flag_and_the_scope(self):
        full = self.full_token("asker")
        plain = self.token("plain-asker")  # no scope claim: the default scopes
        narrow = self.token("narrow-asker", scope=["sandboxes", "exec"])
        for token, body, status, code in (
                (full, {"network": "full"}, 400, "bad_request"),
                (full, {"network": "full", "unsafe": []}, 400, "bad_request"),
                (plain, FULL, 403, "forbidden"),
                (narrow, FULL, 403, "forbidden"),
                (full, {"network": "host", "unsafe": ["full_network"]}, 400, "bad_request"),
                (full, {"network": "host"}, 400, "bad_request")):
            with self.subTest(body=body, token="full" if token is full else "plain" if token is plain else "narrow"):
                got, error = self.daemon.http("POST", "/v1/sandboxes", token, dict(body, start=False))
                self.assertEqual((got, error["error"]["code"]), (status, code), error)
        # Nothing was made by the refused requests.
        for token in (full, plain, narrow):
            status, listed = self.daemon.http("GET", "/v1/sandboxes", token)
            self.assertEqual((status, listed["sandboxes"]), (200, []))
        # Positive controls: the scope and the flag together; and the default for everyone.
        for token, body, mode in ((full, FULL, "full"), (plain, {}, "loopback"), (narrow, {}, "loopback")):
            sandbox = self.create_sandbox(token, **body, start=False)
            self.destroy_later(token, sandbox["id"])
            self.assertEqual(sandbox["network"], mode)

    def test_a_fork_keeps_full_network_and_needs_the_scope_again(self):
        token, sid, _ = self.sandbox("forker")
        # The same user, a token without the scope: the fork is refused, and nothing is made.
        plain = self.token("forker")
        status, error = self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", plain, {"start": False})
        self.assertEqual((status, error["error"]["code"]), (403, "forbidden"), error)
        status, listed = self.daemon.http("GET", "/v1/sandboxes", token)
        self.assertEqual([s["id"] for s in listed["sandboxes"]], [sid])
        # With it: a running copy with a network of its own.
        status, fork = self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", token, {})
        self.assertEqual(status, 201, fork)
        self.destroy_later(token, fork["id"])
        self.assertEqual((fork["network"], fork["state"]), ("full", "running"))
        self.assert_attached(token, fork["id"])
        self.assert_served(token, fork["id"], PUBLIC_ADDRESS)

    # --- 7. D21: no reconfiguring from inside ---

    def test_neither_agent_nor_root_can_reconfigure_the_network_or_open_raw_sockets(self):
        token, sid, _ = self.sandbox("d21")
        before = self.addresses(token, sid)
        for user in ("agent", "root"):
            with self.subTest(user=user):
                out = self.sh(token, sid, RECONFIGURE, user=user)
                lines = {line.split()[0]: line for line in out.splitlines()}
                self.assertEqual(sorted(lines), sorted(RECONFIGURE_ATTEMPTS), out)
                for name in RECONFIGURE_ATTEMPTS:
                    self.assertNotIn(" rc=0 ", lines[name] + " ", f"{user} could: {lines[name]}")
                    self.assertIn("Operation not permitted", lines[name], f"{user}: {lines[name]}")
        # Positive controls: the commands themselves work (root reads the configuration), and
        # nothing changed: same addresses, eth0 up, the way out still open.
        whoami = self.sh(token, sid, "id -u", user="root")
        self.assertEqual(whoami.strip(), "0")
        self.assertEqual(self.addresses(token, sid), before)
        link = json.loads(self.sh(token, sid, f"{IP} -j link show eth0"))[0]
        self.assertIn("UP", link["flags"])
        self.assertNotEqual(link.get("mtu"), 1280)
        self.assert_served(token, sid, PUBLIC_ADDRESS)

    # --- 8. nothing left behind ---

    def test_stop_start_and_destroy_leave_nothing_in_the_router(self):
        token, sid, _ = self.sandbox("cycle")
        _, _, first = self.assert_attached(token, sid)
        self.assert_served(token, sid, PUBLIC_ADDRESS)
        status, row = self.daemon.http("POST", f"/v1/sandboxes/{sid}/stop", token)
        self.assertEqual((status, row["state"]), (200, "stopped"), row)
        self.assert_router_holds_nothing_of(sid, first)
        status, row = self.daemon.http("POST", f"/v1/sandboxes/{sid}/start", token)
        self.assertEqual((status, row["state"], row["network"]), (200, "running", "full"), row)
        self.assert_attached(token, sid, events_before=1)
        self.assert_served(token, sid, PUBLIC_ADDRESS)
        _, _, second = self.assert_attached(token, sid, events_before=1)
        status, body = self.daemon.http("DELETE", f"/v1/sandboxes/{sid}", token)
        self.assertEqual((status, body["state"]), (200, "destroyed"), body)
        self.assert_router_holds_nothing_of(sid, second)

    def test_a_restarted_daemon_removes_what_a_sandbox_that_died_meanwhile_left(self):
        token, doomed, _ = self.sandbox("doomed")
        _, alive, _ = self.sandbox("alive", token=token)
        _, _, doomed_interface = self.assert_attached(token, doomed)
        _, _, alive_interface = self.assert_attached(token, alive)
        (init_pid,) = init_pids(self.daemon, doomed)
        self.daemon.kill9()
        os.kill(init_pid, signal.SIGKILL)
        wait_until(lambda: process_gone(init_pid), 10, what=f"corral-init {init_pid} to die")
        # What the dead sandbox leaves: its table (the veth went with its namespace); and a link
        # named and labelled as corrald's own (crl<N>, ifalias corral:<id>), as a daemon killed
        # between making a veth and moving its peer into the sandbox would leave one.
        self.assertIn(f"corral_{doomed}", self.router_tables())
        leftover = self.plant_link(f"corral:{doomed}")
        self.daemon.start()
        self.assertEqual(self.daemon.http("GET", f"/v1/sandboxes/{doomed}", token)[1]["state"], "stopped")
        self.assert_router_holds_nothing_of(doomed, leftover)
        self.assertNotIn(doomed_interface, [l["ifname"] for l in self.router_links()])
        # Positive control: the running sandbox kept its link, its table and its way out.
        self.assertEqual([l["ifname"] for l in self.links_of(alive)], [alive_interface])
        self.assertIn(f"corral_{alive}", self.router_tables())
        self.assert_served(token, alive, PUBLIC_ADDRESS)
        # And the dead one starts again, attached anew.
        status, row = self.daemon.http("POST", f"/v1/sandboxes/{doomed}/start", token)
        self.assertEqual((status, row["state"]), (200, "running"), row)
        self.assert_attached(token, doomed, events_before=1)
        self.assert_served(token, doomed, PUBLIC_ADDRESS)

    def plant_link(self, alias):
        """A link crl<N> in the router with `alias` (a dummy, else a veth pair with both ends
        there, the other end not named like corrald's), N a slot of the subnet no sandbox here
        uses; removed after the test if the daemon did not. Returns its name."""
        taken = {link["ifname"] for link in self.router_links()}
        name = next(f"crl{n}" for n in range(16383, 16000, -1) if f"crl{n}" not in taken)
        ip = ["ip", "-n", self.router.netns_name]
        if subprocess.run(ip + ["link", "add", name, "type", "dummy"], capture_output=True).returncode != 0:
            run_checked(ip + ["link", "add", name, "type", "veth", "peer", "name", "lfo" + secrets.token_hex(4)])

        def remove():
            if subprocess.run(ip + ["link", "show", name], capture_output=True).returncode == 0:
                run_checked(ip + ["link", "del", name])
        self.addCleanup(remove)
        run_checked(ip + ["link", "set", name, "alias", alias])
        return name

    # --- spoofing ---

    def test_spoofed_source_addresses_are_dropped(self):
        """Nothing in the sandbox may send from another address (the kernel refuses a foreign
        source without CAP_NET_ADMIN or a raw socket, D21), so the test sends from the sandbox's
        network namespace itself, as root outside it: the router must drop what a process that
        got past those would send."""
        token, sid, _ = self.sandbox("spoof")
        address, _, _ = self.assert_attached(token, sid)
        neighbour = str(ipaddress.ip_address(address) + 4)  # another sandbox's address
        tag = secrets.token_hex(4)
        for source in ("198.18.0.99", neighbour):
            with self.subTest(source=source):
                result = self.probe_from_outside(sid, "udp", OTHER_PUBLIC_ADDRESS, LISTENER_PORT, timeout=1,
                                                 payload=f"spoof-{tag}-{source}", source=source)
                self.assertFalse(result["ok"], result)
        # Positive control: the same datagram, the same way, from the sandbox's own address
        # (bound explicitly, as the spoofed ones were) arrives; after it the spoofed ones would
        # have too (the listener logs in order).
        result = self.probe_from_outside(sid, "udp", OTHER_PUBLIC_ADDRESS, LISTENER_PORT,
                                         payload=f"own-{tag}", source=address)
        self.assertEqual((result["ok"], result["reply"]), (True, f"echo own-{tag}"), result)
        self.assertIsNotNone(self.listener.wait_for(lambda e: e.get("data") == f"own-{tag}"))
        spoofed = [e for e in self.listener.entries() if e.get("data", "").startswith(f"spoof-{tag}")]
        self.assertEqual(spoofed, [], "spoofed datagrams reached the fake internet")

if __name__ == "__main__":
    unittest.main()
