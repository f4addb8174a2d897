#!/usr/bin/env bash
# Installs what corral needs, builds it, starts corrald with its defaults (state in
# /var/lib/corral, API on 127.0.0.1:7878, admin socket /run/corral/admin.sock), and walks through
# a first sandbox: an issuer, a token, a sandbox, commands in it, a file in and out, and a
# command that takes 4x the sandbox's memory and is OOM-killed; then dist/agent-demo.sh (an agent
# session against a scripted model, or the real API with ANTHROPIC_API_KEY). corrald keeps
# running afterwards (and so do the sandboxes), for `corral shell`.
set -euo pipefail
cd "$(dirname "$0")/.."
dist/install-deps.sh
dist/build.sh
bin=$PWD/build/tools
corral=$bin/corral
log=/var/log/corrald-quickstart.log

step() { printf '\n+ %s\n' "$*"; }

if curl -fsS http://127.0.0.1:7878/healthz >/dev/null 2>&1; then
  echo "corrald is already running on 127.0.0.1:7878; using it"
  running="corrald is running"
else
  step "corrald --foreground   (in the background; log: $log)"
  setsid "$bin/corrald" --foreground >>"$log" 2>&1 < /dev/null &
  running="corrald is running (pid $!, log $log)"
  for _ in $(seq 100); do
    curl -fsS http://127.0.0.1:7878/healthz >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fsS http://127.0.0.1:7878/healthz; echo
fi

# The issuer is the operator's backend; its secret signs users' tokens. A second run reuses it.
if ! $corral admin issuer ls | grep -qw quickstart; then
  step "corral admin issuer add quickstart"
  $corral admin issuer add quickstart >/dev/null
fi
step "export CORRAL_TOKEN=\$(corral token mint --issuer quickstart --user alice)"
CORRAL_TOKEN=$($corral token mint --issuer quickstart --user alice --ttl 1d)
export CORRAL_TOKEN

step "corral sandbox create --name first --memory 128M"
sandbox=$($corral sandbox create --name first --memory 128M)
echo "$sandbox"

step "corral exec $sandbox -- sh -c 'id; hostname; ls /'"
$corral exec "$sandbox" -- sh -c 'id; hostname; ls /'

step "corral cp README.md $sandbox:/home/agent/README.md && corral exec $sandbox -- wc -l README.md"
$corral cp README.md "$sandbox:/home/agent/README.md"
$corral exec "$sandbox" -- wc -l README.md

step "corral exec $sandbox -- sh -c 'date > made-inside.txt' && corral cp $sandbox:/home/agent/made-inside.txt /tmp/"
$corral exec "$sandbox" -- sh -c 'date > made-inside.txt'
$corral cp "$sandbox:/home/agent/made-inside.txt" /tmp/made-inside.txt
cat /tmp/made-inside.txt

step "corral exec --outcome-json - $sandbox -- python3 -c 'bytearray(512<<20)'"
set +e
$corral exec --outcome-json - "$sandbox" -- python3 -c 'bytearray(512<<20)'
echo "exit code: $?"
set -e

# An image instead of the host's /usr: a busybox-only OCI layout (made here with umoci from
# Debian's busybox-static, no network), imported once, and a sandbox of it.
layout=$(tests/fixtures/make_image.sh busybox)
if ! $corral image ls | grep -q '^busybox:quickstart '; then
  step "corral image import $layout --name busybox:quickstart"
  $corral image import "$layout" --name busybox:quickstart
fi
step "corral sandbox create --name tiny --image busybox:quickstart"
tiny=$($corral sandbox create --name tiny --image busybox:quickstart --memory 64M)
step "corral exec $tiny -- sh -c 'id; ls /bin | wc -l; ls /usr 2>&1'"
$corral exec "$tiny" -- sh -c 'id; ls /bin | wc -l; ls /usr 2>&1' || true

cat <<EOF

$running; so is $sandbox. Next:
  export CORRAL_TOKEN=$CORRAL_TOKEN
  $corral shell $sandbox          # an interactive terminal in it
  open http://127.0.0.1:7878/#token=$CORRAL_TOKEN   # the same in a browser: the web page
  $corral sandbox ls
  $corral sandbox rm $sandbox     # and its files
  $corral image ls                # images: corral image import|pull|tag|rm|prune (README, Images)

Now an agent: Claude Code in a sandbox of its own, its model calls through corrald's relay.
EOF
# CORRAL_QUICKSTART_NO_AGENT=1 stops here.
[ "${CORRAL_QUICKSTART_NO_AGENT:-0}" = 1 ] || exec dist/agent-demo.sh
