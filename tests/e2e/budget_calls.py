"""Model calls that run into one user's AI budget, for the fleet's budget tests (test_fleet_budgets:
two nodes asked directly; test_fleet: three nodes through HAProxy): the budget, what each
scripted answer costs, and shell lines that find an agent session's placeholder key in its
sandbox and make calls with it through the relay on the sandbox's loopback, concurrently, until
refused, as an agent's tool could make them."""
import json

from corral_e2e import micro_usd

BUDGET = 300000  # micro-dollars (USD 0.30 a day)
USAGE = {"input_tokens": 400, "output_tokens": 100}  # every scripted answer's
COST = micro_usd(USAGE)                               # 2,700 micro-dollars a call
WORKERS = 8                                           # concurrent callers in each sandbox

# A Messages request of about 1 KB (so its 400 input tokens are fewer than its bytes, as the
# relay's most possible cost assumes), with tools (so the scripted server counts it as the
# conversation's, answering with the scenario's turns).
BODY = json.dumps({"model": "claude-test-1", "max_tokens": 100, "stream": True,
                   "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
                   "messages": [{"role": "user", "content": "budget " * 120}]}, separators=(",", ":"))

# The session's placeholder key, from its agent's environment (the same user inside, `agent`).
FIND_KEY = ("for p in /proc/[0-9]*; do if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^claude -p'; then "
            "tr '\\0' '\\n' < $p/environ | sed -n 's/^ANTHROPIC_API_KEY=//p'; break; fi; done")


def messages(requests):
    """The model calls among the scripted server's requests (count_tokens is free, not one)."""
    return [r for r in requests if r["path"].split("?")[0] == "/v1/messages"]


def curl(key, body=BODY):
    """A shell line: one model call through the relay on the sandbox's loopback; prints its status."""
    return (f"curl -s -o /dev/null -w '%{{http_code}}' -H 'x-api-key: {key}' -H 'content-type: application/json' "
            f"-H 'anthropic-version: 2023-06-01' --data '{body}' http://127.0.0.1:7880/v1/messages")


def callers(key):
    """WORKERS callers at once, each calling until refused for good: 200 -> again, 429 -> again
    after a moment, anything else (403 spent, 401 the session ended with its budget) -> done.
    Prints "worker status" per call."""
    return (f"call() {{ while :; do c=$({curl(key)}); echo \"$1 $c\"; case $c in 200) ;; 429) sleep 0.1 ;; "
            f"*) return ;; esac; done; }}; for i in $(seq {WORKERS}); do call $i & done; wait")


def tally(out):
    """What callers() printed: (each worker's last status, how many calls were answered 200)."""
    codes = [line.split() for line in out.splitlines() if line.strip()]
    return {worker: code for worker, code in codes}, sum(code == "200" for _, code in codes)
