#!/usr/bin/env python3
"""Checks the deployment files of a fleet (dist/fleet/, docs/FLEET.md "Deploying") without a
cluster: nothing here starts Nomad, Kubernetes or a corrald.

CTest entry point of test `dist_fleet` (tests/CMakeLists.txt, label unit).

1. haproxy/haproxy.cfg passes `haproxy -c`; a copy with a misspelled keyword, the control, fails.
2. kubernetes/corrald-daemonset.yaml parses, with the objects the docs name; each secret corrald
   reads is mounted as a file of its own (subPath: corrald opens secret files with O_NOFOLLOW, and
   a Secret volume's files are symlinks), readable by root alone (defaultMode 0400); the probes
   ask /healthz on the port the config listens on.
3. The corrald.toml in the ConfigMap and in the Nomad job's template (its placeholders filled in)
   parse as TOML and name only tables and keys that dist/corrald.toml documents; a config with an
   unknown key, the control, is refused by the same check. Each *_file the Nomad config names is
   a file one of its templates renders into the secrets directory, mode 0600.

Usage: verify_fleet.py ROOT   exit 0 pass, 1 fail, 77 haproxy is not installed (Debian package
haproxy: dist/install-deps.sh).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

import yaml

failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message, file=sys.stderr)


def documented_keys(corrald_toml):
    """{table: {key, ...}} of dist/corrald.toml: each [table] header, and the `# key = value`
    lines below it (every key is there, commented out with its default)."""
    tables, table = {}, None
    for line in corrald_toml.splitlines():
        header = re.match(r"^\[([a-z_]+)\]\s*$", line)
        if header:
            table = tables.setdefault(header.group(1), set())
            continue
        key = re.match(r"^#\s*([a-z_]+)\s*=", line)
        if key and table is not None:
            table.add(key.group(1))
    return tables


def undocumented(config, tables):
    """The table.key names of `config` (a parsed TOML dict) that dist/corrald.toml lacks."""
    unknown = []
    for table, keys in config.items():
        if table not in tables or not isinstance(keys, dict):
            unknown.append(table)
            continue
        unknown += [table + "." + key for key in keys if key not in tables[table]]
    return unknown


def check_config(name, text, tables):
    try:
        config = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        fail(f"{name}: not TOML: {e}")
        return {}
    unknown = undocumented(config, tables)
    if unknown:
        fail(f"{name}: keys dist/corrald.toml does not document: {', '.join(unknown)}")
    else:
        print(f"ok: {name}: {sum(len(v) for v in config.values())} keys, all in dist/corrald.toml")
    return config


def check_haproxy(path):
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(["haproxy", "-c", "-f", path], capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"haproxy -c {path}: {result.stdout}{result.stderr}")
        else:
            print(f"ok: haproxy -c: {result.stdout.strip()}")
        control = os.path.join(tmp, "haproxy.cfg")
        with open(path) as src, open(control, "w") as dst:
            text = src.read()
            if "timeout tunnel" not in text:
                fail("haproxy.cfg has no `timeout tunnel` (WebSocket streams would get the client timeout)")
            dst.write(text.replace("timeout tunnel", "timeout tunel", 1))
        result = subprocess.run(["haproxy", "-c", "-f", control], capture_output=True, text=True)
        if result.returncode == 0:
            fail("control: haproxy -c accepted `timeout tunel` (so its pass proves nothing)")
        else:
            print("ok: control with `timeout tunel` refused by haproxy -c")


def check_kubernetes(path, tables):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for want in [("Namespace", "corral"), ("ConfigMap", "corrald-config"), ("Secret", "corrald-secrets"),
                 ("DaemonSet", "corrald"), ("Service", "corrald"), ("Service", "corral-postgres")]:
        if want not in kinds:
            fail(f"{path}: no {want[0]} {want[1]}")
    if failures:
        return
    print(f"ok: {os.path.basename(path)}: {len(docs)} objects: " + ", ".join(f"{k} {n}" for k, n in kinds))
    text = kinds[("ConfigMap", "corrald-config")]["data"]["corrald.toml"]
    text = text.replace("@NODE_NAME@", "node-a").replace("@NODE_IP@", "10.0.0.5")
    config = check_config("the ConfigMap's corrald.toml", text, tables)

    spec = kinds[("DaemonSet", "corrald")]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    secret_keys = set(kinds[("Secret", "corrald-secrets")]["stringData"])
    for table, key in [("store", "url_file"), ("node", "cluster_secret_file"), ("relay", "api_key_file")]:
        where = config.get(table, {}).get(key)
        mount = mounts.get(where)
        if mount is None:
            fail(f"{table}.{key} = {where}: not a mount of the container")
            continue
        secret = volumes[mount["name"]].get("secret")
        if secret is None or mount.get("subPath") not in secret_keys:
            fail(f"{where}: not one key of the Secret mounted by subPath")
        elif secret.get("defaultMode") != 0o400:
            fail(f"{where}: the Secret's defaultMode is not 0400")
    listen_port = int(config["api"]["listen"].rsplit(":", 1)[1])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"]:
        get = container[probe]["httpGet"]
        if get["path"] != "/healthz" or ports.get(get["port"], get["port"]) != listen_port:
            fail(f"{probe}: not GET /healthz on api.listen's port {listen_port}")
    for flag in ["hostNetwork", "hostPID"]:
        if spec.get(flag) is not True:
            fail(f"the DaemonSet's pod has no {flag}: true")
    if not failures:
        print("ok: the secrets are root's files by subPath, the probes ask /healthz on port "
              f"{listen_port}, hostNetwork and hostPID")


def heredocs(hcl):
    """(destination, text) of each template in a Nomad job: its `data = <<-EOT` heredoc, with the
    indentation HCL strips (the least of its lines')."""
    found = []
    for block in re.finditer(r"template\s*\{(.*?)\n\s*EOT\n", hcl, re.S):
        body = block.group(1)
        dest = re.search(r'destination\s*=\s*"([^"]+)"', body)
        perms = re.search(r'perms\s*=\s*"([^"]+)"', body)
        data = re.search(r"<<-EOT\n(.*)$", body, re.S)
        if not dest or not data:
            continue
        lines = data.group(1).split("\n")
        indent = min(len(l) - len(l.lstrip()) for l in lines if l.strip())
        found.append((dest.group(1), perms.group(1) if perms else "", "\n".join(l[indent:] for l in lines) + "\n"))
    return found


def check_nomad(path, tables):
    with open(path) as f:
        hcl = f.read()
    if not re.search(r'^\s*type\s*=\s*"system"', hcl, re.M):
        fail(f"{path}: not a system job")
    if not re.search(r"max_parallel\s*=\s*1\b", hcl):
        fail(f"{path}: no update with max_parallel = 1")
    if not re.search(r'path\s*=\s*"/healthz"', hcl):
        fail(f"{path}: no check on /healthz")
    templates = heredocs(hcl)
    configs = [t for t in templates if t[0] == "local/corrald.toml"]
    if len(configs) != 1:
        fail(f"{path}: expected one template rendering local/corrald.toml, found {len(configs)}")
        return
    values = {"attr.unique.network.ip-address": "10.0.0.5", "NOMAD_PORT_api": "7878",
              "node.unique.name": "client-a", "NOMAD_SECRETS_DIR": "/alloc/corrald/secrets"}
    text = re.sub(r'\{\{\s*env\s+"([^"]+)"\s*\}\}', lambda m: values.get(m.group(1), "@" + m.group(1) + "@"), configs[0][2])
    for unknown in re.findall(r"@([^@\s]+)@|(\{\{)", text):
        fail(f"the Nomad config template uses {unknown[0] or 'a template action'} this check does not fill in")
    config = check_config("the Nomad job's corrald.toml", text, tables)
    rendered = {dest: perms for dest, perms, _ in templates}
    for table, key in [("store", "url_file"), ("node", "cluster_secret_file"), ("relay", "api_key_file")]:
        where = config.get(table, {}).get(key, "")
        dest = "secrets/" + os.path.basename(where)
        if not where.startswith(values["NOMAD_SECRETS_DIR"] + "/") or rendered.get(dest) != "0600":
            fail(f"{table}.{key} = {where}: no template renders it into secrets/ with perms 0600")
    if not failures:
        print(f"ok: {os.path.basename(path)}: a system job, max_parallel = 1, a /healthz check, "
              "its secrets rendered 0600")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 1
    root = sys.argv[1]
    fleet = os.path.join(root, "dist", "fleet")
    if shutil.which("haproxy") is None:
        print("skipped: haproxy is not installed (Debian package haproxy: dist/install-deps.sh)", file=sys.stderr)
        return 77
    with open(os.path.join(root, "dist", "corrald.toml")) as f:
        tables = documented_keys(f.read())
    # The control of step 3: the same check refuses a key corrald does not have.
    if undocumented({"node": {"id": "a", "cluster_secret": "x"}}, tables) != ["node.cluster_secret"]:
        fail("control: the key check did not refuse node.cluster_secret (so its passes prove nothing)")
    check_haproxy(os.path.join(fleet, "haproxy", "haproxy.cfg"))
    check_kubernetes(os.path.join(fleet, "kubernetes", "corrald-daemonset.yaml"), tables)
    check_nomad(os.path.join(fleet, "nomad", "corrald.nomad.hcl"), tables)
    if failures:
        print(f"{len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
