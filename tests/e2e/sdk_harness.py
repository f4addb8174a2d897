"""A real corrald for the SDKs' tests (sdk/typescript, sdk/python) and the web page's (web/):
starts it (through corral_e2e.Daemon, which removes everything it made afterwards) with its model
relay pointed at the scripted Messages API server (tests/fixtures/scripted_model.py), which the
tests script through its control endpoint (PUT /_scripted/scenario), adds an issuer, and hands
the test runner, in its environment:

  CORRAL_URL, CORRAL_ISSUER, CORRAL_SECRET   the daemon and an issuer to mint tokens with
  CORRAL_MODEL_URL                           the scripted server
  CORRAL_REAL_KEY                            the operator's key (must reach the upstream only)
  CORRAL_PRICE                               the relay's price table (JSON, USD per million tokens)
"""
import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from corral_e2e import PRICE, Daemon, relay_config  # noqa: E402
import scripted_model  # noqa: E402

REAL_KEY = "sk-ant-js-tests-operator-key"


@contextlib.contextmanager
def sdk_daemon(issuer, api_config=""):
    """Yields (the environment above, the Daemon) while corrald and the scripted server run."""
    upstream = scripted_model.serve({"turns": []}, port=0)
    key_dir = tempfile.mkdtemp(prefix="corral-sdk-tests-")
    key_file = os.path.join(key_dir, "api-key")
    with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(REAL_KEY + "\n")
    # Secrets (their routes and placeholders; the SDKs' tests reach no host through the proxy).
    secrets_key_file = os.path.join(key_dir, "secrets.key")
    with open(os.open(secrets_key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(base64.b64encode(os.urandom(32)).decode() + "\n")
    daemon = Daemon()
    daemon.extra_api_config = api_config
    daemon.extra_config = relay_config(upstream.port, key_file, PRICE) + """
[sessions]
tool_call_timeout = 20

[auth]
# A token ends within a second of its exp: the SDKs' and the page's renewal tests wait for it.
max_clock_skew = 1

[egress]
enabled = true

[secrets]
key_file = "%s"
""" % secrets_key_file
    try:
        daemon.start()
        secret = daemon.add_issuer(issuer)
        env = dict(os.environ, CORRAL_URL=f"http://127.0.0.1:{daemon.port}", CORRAL_ISSUER=issuer,
                   CORRAL_SECRET=secret, CORRAL_MODEL_URL=f"http://127.0.0.1:{upstream.port}",
                   CORRAL_REAL_KEY=REAL_KEY, CORRAL_PRICE=json.dumps(PRICE))
        yield env, daemon
    finally:
        daemon.cleanup()
        upstream.shutdown()
        upstream.server_close()
        shutil.rmtree(key_dir, ignore_errors=True)


def run_with_daemon(argv, cwd, issuer, extra_env=None, api_config=""):
    """Runs a test runner's command line with a daemon started for it. Returns its exit status;
    on failure prints the end of corrald's log."""
    with sdk_daemon(issuer, api_config) as (env, daemon):
        code = subprocess.run(argv, cwd=cwd, env=dict(env, **(extra_env or {}))).returncode
        if code:
            print("--- corrald's log (last 60 lines) ---\n" + "\n".join(daemon.log().splitlines()[-60:]),
                  file=sys.stderr)
        return code
