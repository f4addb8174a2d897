"""Shared by the SDK's tests: the daemon and scripted model that run_tests.py started (through
tests/e2e/sdk_harness.py), clients with minted tokens, and the model's scenario and request log.
The tests import `corral` as pip installed it (run_tests.py's virtual environment)."""
import asyncio
import json
import os
import unittest
import urllib.request

import corral

ENV = {"url": os.environ.get("CORRAL_URL"), "issuer": os.environ.get("CORRAL_ISSUER"),
       "secret": os.environ.get("CORRAL_SECRET"), "model": os.environ.get("CORRAL_MODEL_URL"),
       "real_key": os.environ.get("CORRAL_REAL_KEY")}
PRICE = json.loads(os.environ.get("CORRAL_PRICE", "{}"))


def have_daemon():
    return all(ENV[k] for k in ("url", "issuer", "secret", "model"))


def token(user, **extra):
    return corral.create_token(issuer=ENV["issuer"], secret=ENV["secret"], user_id=user, **extra)


def ai_budget():
    return corral.TokenBudget(window="day", ai_usd=5)


def _model(method, path, body=None):
    request = urllib.request.Request(ENV["model"] + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def play(turns):
    """The scripted model's next answers (tests/fixtures/scripted_model.py's scenario format)."""
    _model("PUT", "/_scripted/scenario", {"turns": turns})


def main_requests():
    """The model calls that carried the conversation (not the CLI's housekeeping calls)."""
    return [r for r in _model("GET", "/_scripted/requests") if r.get("kind") == "main"]


def micro_usd(usage):
    """What the relay charges for a usage, in micro-dollars (prices are per million tokens)."""
    p = PRICE
    return round(usage.get("input_tokens", 0) * p["input"] + usage.get("output_tokens", 0) * p["output"]
                 + usage.get("cache_creation_input_tokens", 0) * p["cache_write"]
                 + usage.get("cache_read_input_tokens", 0) * p["cache_read"])


def usd(micro):
    return f"{micro // 1_000_000}.{micro % 1_000_000:06d}"


def user_texts(request):
    """The text of the user messages of a Messages API request."""
    texts = []
    for message in request["body"]["messages"]:
        if message["role"] != "user":
            continue
        if isinstance(message["content"], str):
            texts.append(message["content"])
        else:
            texts.extend(c["text"] for c in message["content"] if c.get("type") == "text" and c.get("text"))
    return texts


def tool_results(request):
    """The tool results of the request's last message: [(is_error, text)]."""
    last = request["body"]["messages"][-1]
    out = []
    for c in last["content"] if isinstance(last["content"], list) else []:
        if c.get("type") == "tool_result":
            content = c["content"]
            text = content if isinstance(content, str) else "".join(x["text"] for x in content if x.get("type") == "text")
            out.append((bool(c.get("is_error")), text))
    return out


class DaemonTest(unittest.IsolatedAsyncioTestCase):
    """A test against the real corrald; `self.client(user)` is closed after the test."""

    def setUp(self):
        if not have_daemon():
            self.fail("run through run_tests.py (CORRAL_URL, CORRAL_ISSUER, CORRAL_SECRET, CORRAL_MODEL_URL)")

    async def asyncSetUp(self):
        # unittest runs the loop in debug mode, which logs every step over 0.1 s (the tests' own
        # blocking git and HTTP calls): only what blocks for seconds is worth a line.
        asyncio.get_running_loop().slow_callback_duration = 2.0

    def client(self, user, token_extra=None, **options):
        c = corral.AsyncCorral(ENV["url"], token(user, **(token_extra or {})), **options)
        self.addAsyncCleanup(c.close)
        return c

    async def sandbox(self, c, **options):
        """A sandbox destroyed after the test."""
        made = await c.create_sandbox(**options)

        async def destroy():
            try:
                await c.destroy_sandbox(made.id)
            except corral.CorralError as error:
                if error.code != "not_found":
                    raise
        self.addAsyncCleanup(destroy)
        return made

    async def within(self, awaitable, seconds, what):
        try:
            return await asyncio.wait_for(awaitable, seconds)
        except asyncio.TimeoutError:
            self.fail(f"timed out: {what}")


def scenario(name):
    """A scenario both SDKs' tests play (tests/e2e/sdk_scenarios.json)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "e2e", "sdk_scenarios.json")
    with open(path) as f:
        return json.load(f)[name]
