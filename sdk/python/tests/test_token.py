"""create_token against the TypeScript SDK's createToken (sdk/typescript/dist/token.js, which
run_tests.py builds): for the same input both mint the same token, byte for byte; the claims are
those of docs/PROTOCOL.md "Tokens", and the signature an independent HMAC checks."""
import base64
import hashlib
import hmac
import json
import os
import subprocess
import unittest

import corral
from corral.token import token_expiry

SECRET = "s" * 40
TS_SDK = os.environ.get("CORRAL_TS_SDK", os.path.join(os.path.dirname(__file__), "..", "..", "typescript", "dist"))

# (Python's keyword arguments, TypeScript's options): the same token asked of each.
CASES = [
    ({"issuer": "acme", "secret": SECRET, "user_id": "u-42", "jti": "fixed-id", "now": 1700000000},
     {"issuer": "acme", "secret": SECRET, "userId": "u-42", "jti": "fixed-id", "now": 1700000000}),
    ({"issuer": "acme", "secret": SECRET, "user_id": "u-42", "jti": "j2", "now": 1700000000, "ttl": 600,
      "scopes": ["sandboxes", "exec"],
      "budget": corral.TokenBudget(window="day", ai_usd=5.0, compute_seconds=3600, window_start=1699990000)},
     {"issuer": "acme", "secret": SECRET, "userId": "u-42", "jti": "j2", "now": 1700000000, "ttl": 600,
      "scopes": ["sandboxes", "exec"], "budget": {"aiUsd": 5, "computeSeconds": 3600, "window": "day",
                                                  "windowStart": 1699990000}}),
    ({"issuer": "ünïcode", "secret": "é" * 20, "user_id": "用户", "jti": "j3", "now": 1700000001,
      "budget": corral.TokenBudget(window="hour", ai_usd=0.25), "scopes": [],
      "limits": {"sandboxes": 2, "memory_bytes": 2 << 30, "cpus": 1.5, "images": ["python:*", "host"],
                 "egress": {"domains": ["a.test"], "ports": [443]}}},
     {"issuer": "ünïcode", "secret": "é" * 20, "userId": "用户", "jti": "j3", "now": 1700000001,
      "budget": {"aiUsd": 0.25, "window": "hour"}, "scopes": [],
      "limits": {"sandboxes": 2, "memory_bytes": 2 << 30, "cpus": 1.5, "images": ["python:*", "host"],
                 "egress": {"domains": ["a.test"], "ports": [443]}}}),
    # Odd characters in the user's id: quotes, slashes, controls, an emoji, a line separator.
    ({"issuer": "acme", "secret": SECRET, "user_id": 'a "b"/../c\\\n\t\x01\x7f 😀\u2028<>&', "jti": "j4",
      "now": 1700000002, "scopes": ["ports:public", "unsafe:full_network"]},
     {"issuer": "acme", "secret": SECRET, "userId": 'a "b"/../c\\\n\t\x01\x7f 😀\u2028<>&', "jti": "j4",
      "now": 1700000002, "scopes": ["ports:public", "unsafe:full_network"]}),
]


def typescript_tokens(options):
    script = ("import { createToken } from %s;\n"
              "const cases = JSON.parse(process.argv[1]);\n"
              "console.log(JSON.stringify(cases.map((c) => createToken(c))));\n") % json.dumps(
                  "file://" + os.path.abspath(os.path.join(TS_SDK, "token.js")))
    out = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(options)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def decode(part):
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


class Token(unittest.TestCase):
    def test_both_sdks_mint_the_same_token_byte_for_byte(self):
        if not os.path.exists(os.path.join(TS_SDK, "token.js")):
            self.fail(f"{TS_SDK}/token.js is not built (run through run_tests.py)")
        ours = [corral.create_token(**py) for py, _ in CASES]
        theirs = typescript_tokens([ts for _, ts in CASES])
        self.assertEqual(ours, theirs)
        self.assertEqual(len(set(ours)), len(CASES))  # the cases differ (the comparison could fail)

    def test_the_claims_and_an_independent_signature(self):
        token = corral.create_token(issuer="acme", secret=SECRET, user_id="u-42", ttl=600, now=1700000000,
                                    budget=corral.TokenBudget(window="day", ai_usd=5, compute_seconds=60))
        head, body, signature = token.split(".")
        self.assertEqual(decode(head), {"alg": "HS256", "typ": "JWT"})
        claims = decode(body)
        self.assertEqual({k: claims[k] for k in ("iss", "sub", "iat", "exp")},
                         {"iss": "acme", "sub": "u-42", "iat": 1700000000, "exp": 1700000600})
        self.assertEqual(claims["budget"], {"window": "day", "ai_usd": 5, "compute_s": 60})
        self.assertNotIn("scope", claims)
        self.assertGreaterEqual(len(claims["jti"]), 20)
        expected = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
        self.assertEqual(base64.urlsafe_b64decode(signature + "="), expected)
        self.assertEqual(token_expiry(token), 1700000600)
        # Random ids: two tokens otherwise the same differ.
        again = corral.create_token(issuer="acme", secret=SECRET, user_id="u-42", ttl=600, now=1700000000)
        self.assertNotEqual(decode(again.split(".")[1])["jti"], claims["jti"])

    def test_bad_input_is_refused(self):
        for kwargs, message in (({"secret": "short"}, "at least 32 bytes"), ({"issuer": ""}, "issuer"),
                                ({"user_id": ""}, "user_id"), ({"ttl": 0}, "ttl"), ({"ttl": 1.5}, "ttl")):
            arguments = {"issuer": "acme", "secret": SECRET, "user_id": "u", **kwargs}
            with self.assertRaisesRegex(ValueError, message):
                corral.create_token(**arguments)
        self.assertIsNone(token_expiry("not-a-token"))

    def test_what_corrald_would_refuse_is_refused_when_minted(self):
        """corrald answers a bad token 401 and says why only in its log: the backend learns here."""
        day = corral.TokenBudget
        for kwargs, message in (
                ({"user_id": "x" * 257}, "longer than 256"), ({"user_id": "é" * 129}, "longer than 256"),
                ({"issuer": "i" * 129}, "longer than 128"), ({"user_id": "a\0b"}, "NUL"),
                ({"user_id": "\ud800"}, "surrogate"), ({"user_id": 42}, "user_id"), ({"issuer": None}, "issuer"),
                ({"ttl": -60}, "ttl"), ({"ttl": True}, "ttl"), ({"now": -1}, "now"), ({"now": 1.5}, "now"),
                ({"jti": ""}, "jti"), ({"scopes": "sandboxes exec"}, "not a string"),
                ({"scopes": ["files sandboxes"]}, "scope name"), ({"scopes": [""]}, "scope name"),
                ({"budget": day(window="year", ai_usd=1)}, "window"),
                ({"budget": day(window="day", ai_usd=-1)}, "ai_usd"),
                ({"budget": day(window="day", ai_usd=float("nan"))}, "ai_usd"),
                ({"budget": day(window="day", ai_usd=float("inf"))}, "ai_usd"),
                ({"budget": day(window="day", ai_usd="5")}, "ai_usd"),  # type: ignore[arg-type]
                ({"budget": day(window="day", compute_seconds=-0.5)}, "compute_seconds"),
                ({"budget": day(window="day", ai_usd=1, window_start=1.5)}, "window_start"),  # type: ignore[arg-type]
                ({"limits": {"images": ["x" * 200] * 60}}, "8192")):
            arguments = {"issuer": "acme", "secret": SECRET, "user_id": "u", **kwargs}
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(ValueError, message):
                corral.create_token(**arguments)
        # Controls: the edges that are allowed.
        for kwargs in ({"user_id": "x" * 256}, {"user_id": "é" * 128}, {"issuer": "i" * 128},
                       {"budget": day(window="day", ai_usd=0, compute_seconds=0)}, {"scopes": []}):
            arguments = {"issuer": "acme", "secret": SECRET, "user_id": "u", **kwargs}
            self.assertEqual(len(corral.create_token(**arguments).split(".")), 3)
