#!/usr/bin/env bash
# install-deps.sh [all|build|rest] - installs every Debian package corral's build, tests and
# benchmarks need (all, the default), or only what `dist/build.sh` needs (build: the compiler,
# the libraries, the web page's npm packages), or everything else (rest: what the tests,
# benchmarks and the sanitizer stage use; dist/test.sh installs it while corral compiles).
# Idempotent: packages already present are left alone, and apt is only consulted when something
# is missing.
set -euo pipefail

group=${1:-all}
case $group in all|build|rest) ;; *) echo "usage: $0 [all|build|rest]" >&2; exit 2 ;; esac

build_packages=(
  build-essential cmake pkg-config git
  libseccomp-dev libcap-dev libnl-3-dev libnl-route-3-dev
  libboost-dev libboost-system-dev nlohmann-json3-dev libsqlite3-dev libssl-dev
  libtomlplusplus-dev libsystemd-dev sqlite3
  # corral cp: tar archives for directories
  libarchive-dev
  # egress proxy: asynchronous DNS against a configured resolver (egress.resolver)
  libc-ares-dev
  # full network mode: veth, addresses and routes with libnl, the filter and NAT with libnftables
  libnftables-dev
  # the store on PostgreSQL ([store] backend = "postgresql", a fleet's shared state): libpq
  libpq-dev
  # the tests' and benchmarks' programs
  libgtest-dev libgmock-dev libbenchmark-dev
  # the web page's build (esbuild, from web/node_modules)
  nodejs
)
rest_packages=(
  # the nft command, for tests and operators to look at the full network mode's rules
  nftables
  # the sanitizer stage of dist/test.sh: Clang, with its ASan and UBSan runtimes
  clang-16 libclang-rt-16-dev
  # tests
  python3 iproute2 procps util-linux curl
  # the store's tests on PostgreSQL: Debian's server, started by the tests in a temp dir of their
  # own (tests/fixtures/postgres.py); the package's own cluster is not used
  postgresql-15
  # a fleet's front door: HAProxy, the load balancer of dist/fleet/haproxy (checked with
  # `haproxy -c` by tests/dist/verify_fleet.py, which reads dist/fleet/'s Kubernetes file with
  # python3-yaml), and of the fleet suite (tests/e2e/test_fleet.py). The package's own service runs
  # Debian's config, which listens on nothing
  haproxy python3-yaml
  # the compatibility suite (tests/compat): CPython's own regression tests, run on the host and
  # in a sandbox
  libpython3.11-testsuite
  # systemd-analyze, to verify dist/corrald.service (tests/dist). It works without systemd as PID 1,
  # and this package does not make systemd the init system (systemd-sysv does)
  systemd
  # e2e tests: real WebSocket clients (Debian's python3-websockets, and node-ws for
  # tests/e2e/node/ws_client.mjs)
  python3-websockets node-ws
  # the Python SDK (sdk/python): its runtime dependencies, Debian's python3-httpx and
  # python3-websockets (above); its wheel built with python3-setuptools and python3-wheel (no
  # registry: pip wheel --no-build-isolation), installed with pip into a python3-venv virtual
  # environment by its tests, and checked with mypy --strict
  python3-httpx python3-setuptools python3-wheel python3-venv mypy
  # egress proxy tests: the fake internet (tests/fixtures/fake_internet.py) makes its test CA
  # with python3-cryptography and its git repository with git; its self-test installs a
  # package from it with pip
  python3-cryptography python3-pip
  # runtime: mkfs.ext4 for disk-capped workspaces (busybox-static, below, is also used by the
  # image tests)
  e2fsprogs
  # tests: a loop-mounted XFS with project quotas, where sandboxes' disk caps are project quotas
  # (rootfs/project_quota.h)
  xfsprogs
  # cgroup v2 suite in a QEMU guest (tests/cgv2)
  qemu-system-x86 busybox-static cpio zstd xz-utils
  # the Debian package (cpack: dpkg-shlibdeps from dpkg-dev, and file) and its install test on a
  # clean Debian 12 made by debootstrap (tests/package)
  dpkg-dev file debootstrap
  # the web page's browser tests (web/test): Debian's Chromium, driven by playwright-core
  chromium
  # benchmarks (bench/)
  bubblewrap crun runc hyperfine time jq
  # images: `corral image pull` copies from registries into an OCI layout with skopeo; the image
  # tests' layouts are made with umoci (tests/fixtures/make_image.sh), their Debian image with
  # mmdebstrap from the host's mirror, and pulled from a real registry on loopback
  # (tests/fixtures/registry.py: docker-registry, its htpasswd users from apache2-utils)
  skopeo umoci mmdebstrap docker-registry apache2-utils
  # agent sessions in images without bash (busybox, musl): Claude Code's Bash tool needs a bash
  # or zsh, so corrald provides this static one (supervisor/sandboxes/claude_runtime.h)
  bash-static
)

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: run as root (sudo $0)" >&2
  exit 1
fi

packages=()
case $group in
  all) packages=("${build_packages[@]}" "${rest_packages[@]}") ;;
  build) packages=("${build_packages[@]}") ;;
  rest) packages=("${rest_packages[@]}") ;;
esac
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# npm: the machine's own when it has one, else Debian's.
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present ($group)"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # docker-registry's package starts a registry for the whole machine on :5000 where systemd
  # runs; the tests start their own on loopback (tests/fixtures/registry.py). Just installed,
  # it is stopped and left disabled.
  if [[ " ${missing[*]} " == *" docker-registry "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now docker-registry.service || true
  fi
fi

# The three npm installs below wait on the registry, not the CPU: they run at once. The web
# page's is the build's; the other two are the tests'.
npm_jobs=()
want() { [ "$group" = all ] || [ "$group" = "$1" ]; }

# Claude Code, the agent that sessions run (a native binary; npm only installs it). In the
# host's /usr, so the `host` image shows it inside every sandbox. Pinned: the session runner and
# the scripted model server (tests/fixtures) are tested against this version's stream-json.
CLAUDE_CODE_VERSION=$(cat "$(dirname "${BASH_SOURCE[0]}")/claude-code-version")  # also `corral doctor`'s
if want rest && [ "$(claude --version 2>/dev/null | awk '{print $1}')" != "$CLAUDE_CODE_VERSION" ]; then
  echo "install-deps: installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"
  npm install -g --no-fund --no-audit --loglevel=error "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" &
  npm_jobs+=($!)
fi

# The TypeScript SDK's build and test dependencies (typescript, ws and their types), exactly as
# its lock file names them, into sdk/typescript/node_modules.
sdk_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/sdk/typescript"
if want rest && [ ! -d "$sdk_dir/node_modules" ]; then
  echo "install-deps: npm ci in sdk/typescript"
  (cd "$sdk_dir" && npm ci --no-fund --no-audit --loglevel=error) &
  npm_jobs+=($!)
fi

# The web page's build (esbuild, xterm.js) and browser-test (playwright-core, which drives
# Debian's /usr/bin/chromium: it downloads no browser) dependencies, into web/node_modules. The
# CMake build then builds the page beside corrald.
web_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/web"
if want build && [ ! -d "$web_dir/node_modules" ]; then
  echo "install-deps: npm ci in web"
  (cd "$web_dir" && npm ci --no-fund --no-audit --loglevel=error) &
  npm_jobs+=($!)
fi

npm_failed=0
for job in "${npm_jobs[@]}"; do wait "$job" || npm_failed=1; done
if [ "$npm_failed" -ne 0 ]; then
  echo "install-deps: an npm install failed (its error is above)" >&2
  exit 1
fi
