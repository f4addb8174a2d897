#!/usr/bin/env bash
# An agent session from the command line, against a scripted model (no API key needed) or the
# real Anthropic API (ANTHROPIC_API_KEY set): starts corrald with its model relay configured,
# mints a token with an AI budget, runs `corral prompt` (the agent writes hello.py and runs it,
# live, then the cost), resumes the session with a follow-up, and shows the usage.
#
# Run after dist/quickstart.sh (which installs and builds), as root. It stops a corrald that
# quickstart left running on 127.0.0.1:7878 and starts one with the relay (same state: the
# sandboxes are adopted), and leaves it and the scripted model running.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/tools/corrald ] || { dist/install-deps.sh && dist/build.sh; }
bin=$PWD/build/tools
corral=$bin/corral
conf_dir=/run/corral-demo
log=/var/log/corrald-demo.log
mkdir -p "$conf_dir" && chmod 700 "$conf_dir"

step() { printf '\n+ %s\n' "$*"; }

# The model: the real API with your key, or the scripted server the tests use, on loopback.
if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
  upstream=https://api.anthropic.com
  printf '%s\n' "$ANTHROPIC_API_KEY" >"$conf_dir/api-key"
  model_note="the Anthropic API"
else
  port=17881
  # A fresh one each run: the scenario's turns are played once.
  if [ -f "$conf_dir/model.pid" ] && kill -0 "$(cat "$conf_dir/model.pid")" 2>/dev/null; then
    kill "$(cat "$conf_dir/model.pid")"
    sleep 0.2
  fi
  step "tests/fixtures/scripted_model.py --port $port --scenario dist/demo-scenario.json   (in the background)"
  setsid /usr/bin/python3 tests/fixtures/scripted_model.py --port "$port" --scenario dist/demo-scenario.json \
    >/var/log/corral-demo-model.log 2>&1 </dev/null &
  echo $! >"$conf_dir/model.pid"
  for _ in $(seq 50); do curl -fsS "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
  upstream=http://127.0.0.1:$port
  printf 'sk-demo-not-a-real-key\n' >"$conf_dir/api-key"
  model_note="a scripted model (tests/fixtures/scripted_model.py, dist/demo-scenario.json)"
fi
chmod 600 "$conf_dir/api-key"
# Prices in USD per million tokens; "default" prices every model.
cat >"$conf_dir/corrald.toml" <<TOML
[relay]
upstream = "$upstream"
api_key_file = "$conf_dir/api-key"
[relay.prices.default]
input = 3
output = 15
cache_write = 3.75
cache_read = 0.3
TOML

# The corrald that serves 127.0.0.1:7878 (quickstart's), if any.
if pid=$(ss -Hltnp 'sport = :7878' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2) && [ -n "$pid" ]; then
  step "kill -TERM $pid   (the corrald on 127.0.0.1:7878; its sandboxes keep running)"
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
fi
step "corrald --config $conf_dir/corrald.toml --foreground   (in the background; log: $log)"
setsid "$bin/corrald" --config "$conf_dir/corrald.toml" --foreground >>"$log" 2>&1 </dev/null &
for _ in $(seq 100); do curl -fsS http://127.0.0.1:7878/healthz >/dev/null 2>&1 && break; sleep 0.1; done

$corral admin issuer ls | grep -qw quickstart || $corral admin issuer add quickstart >/dev/null
step "export CORRAL_TOKEN=\$(corral token mint --issuer quickstart --user alice --budget-usd 5 --budget-window day)"
CORRAL_TOKEN=$($corral token mint --issuer quickstart --user alice --ttl 1d --budget-usd 5 --budget-window day)
export CORRAL_TOKEN

# Claude Code needs more memory than quickstart's 128M sandbox: one of its own.
sandbox=$($corral sandbox ls --json | /usr/bin/python3 -c 'import json,sys; print(next((s["id"] for s in json.load(sys.stdin)["sandboxes"] if s["name"] == "agent"), ""))')
if [ -z "$sandbox" ]; then
  step "corral sandbox create --name agent --memory 2G"
  sandbox=$($corral sandbox create --name agent --memory 2G)
else
  $corral sandbox start "$sandbox" >/dev/null
fi

step "corral prompt --sandbox $sandbox --keep \"create hello.py that prints hi and run it\""
$corral prompt --sandbox "$sandbox" --keep "create hello.py that prints hi and run it" 2>&1 | tee "$conf_dir/prompt.out"
session=$(grep -o 'ses_[a-z0-9]*' "$conf_dir/prompt.out" | head -1)

step "corral prompt --resume $session \"now make it print hello\""
$corral prompt --resume "$session" "now make it print hello"

step "corral exec $sandbox -- python3 hello.py"
$corral exec "$sandbox" -- python3 hello.py

step "corral usage"
$corral usage

cat <<MSG

The agent ran in $sandbox against $model_note, through corrald's relay (which held the key and
metered every call). corrald keeps running (log $log). Next:
  open http://127.0.0.1:7878/#token=$CORRAL_TOKEN
      # in a browser on this machine (elsewhere: ssh -L 7878:127.0.0.1:7878 this-host): the web
      # page, with a terminal in $sandbox and its agent session view (the token stays in the tab)
  export CORRAL_TOKEN=$CORRAL_TOKEN
  $corral prompt --allow-host-tools "list the files here"     # tools that run on this machine, with your consent
MSG
