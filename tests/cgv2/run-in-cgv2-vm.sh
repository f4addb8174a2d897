#!/usr/bin/env bash
# Origin: copied from ../shared/tools/cgv2-vm/run-in-cgv2-vm.sh (the cgroup v2 QEMU
# feasibility study; its NOTES.md documents every pitfall met). Behaviour kept as is,
# except: the default cache location (CGV2VM_CACHE, see below) lives outside the
# git clone so that CI runs on the same machine reuse it; and a --share under /tmp or
# /run (fresh tmpfs in the guest) is now created there before mounting, instead of
# failing the boot with "mount share ... No such file or directory"; and --root DIR with
# --boot-systemd (below) boot another root file system with systemd as PID 1, for the
# package test (tests/package/).
#
# run-in-cgv2-vm.sh - run a host command as root inside a throw-away QEMU guest
# whose kernel has a real, unified cgroup v2 hierarchy (Debian's stock kernel).
#
#   run-in-cgv2-vm.sh [options] [--] /path/to/exe [args...]
#
# The guest sees the host's whole filesystem read-only (9p, with a tmpfs overlay
# so writes succeed but are discarded), plus read-write 9p shares of the
# directories given with --share (default: the current directory), mounted at
# the same absolute paths. The command runs as root, in the root cgroup of a
# cgroup2 hierarchy mounted at /sys/fs/cgroup with all controllers enabled in
# cgroup.subtree_control, in the current directory, with the caller's
# environment. Its stdout/stderr are streamed to ours; its exit status becomes
# ours. Exit statuses of our own: 124 timeout, 125 VM/setup failure.
#
# Options (each also settable via the environment variable in brackets):
#   --share DIR        share DIR read-write at the same path (repeatable)
#                      [CGV2VM_SHARES, colon-separated; default: $PWD]
#   --cwd DIR          working directory in the guest [CGV2VM_CWD; default $PWD]
#   --mem SIZE         guest RAM, e.g. 2G [CGV2VM_MEM; default 2G]
#   --smp N            guest vCPUs [CGV2VM_SMP; default: host CPUs, max 4]
#   --timeout SEC      kill the VM after SEC seconds [CGV2VM_TIMEOUT; 900]
#   --cgroup NAME      run the command in /sys/fs/cgroup/NAME instead of the
#                      root cgroup [CGV2VM_CGROUP]
#   --controllers LIST controllers to enable at the root, e.g. "memory pids",
#                      "all" or "none" [CGV2VM_CONTROLLERS; default all]
#   --accel tcg|kvm    [CGV2VM_ACCEL; default tcg - see NOTES.md: /dev/kvm on
#                      this kind of machine cannot run a stock kernel]
#   --merge-stderr     send the command's stderr into stdout, in order (by
#                      default it arrives on our stderr, not ordered relative
#                      to stdout) [CGV2VM_MERGE_STDERR=1]
#   --console          copy the guest kernel log to stderr afterwards
#                      [CGV2VM_CONSOLE=1]
#   --kernel-cmdline S extra kernel command line [CGV2VM_APPEND]
#   --root DIR         the guest's lower root file system instead of the host's /
#                      (e.g. a debootstrap tree; still under a tmpfs overlay) [CGV2VM_ROOT]
#   --boot-systemd     boot DIR's systemd as PID 1 and run the command as a oneshot
#                      service once multi-user.target is reached; its output (stdout and
#                      stderr together) is printed when the guest has powered off. systemd
#                      mounts cgroup2 (the controllers it enables) [CGV2VM_BOOT=systemd]
#   --prepare          only download/build kernel + initramfs, then exit
#   --kernel-suite S   take the kernel from Debian suite S, e.g. "backports"
#                      (bookworm-backports: 6.12) [CGV2VM_KERNEL_SUITE]
#   -h | --help
# Other environment: CGV2VM_CACHE (where kernel/initramfs are kept; default
# /var/cache/corral/cgv2vm, created if missing), CGV2VM_KERNEL_PKG (Debian kernel package,
# default: whatever linux-image-amd64 depends on), CGV2VM_NO_INSTALL=1 (never
# call apt-get), CGV2VM_REFRESH=1 (re-resolve linux-image-amd64), CGV2VM_MACHINE
# (microvm|q35|pc), CGV2VM_TSC_KHZ, CGV2VM_ASLR=1 (keep ASLR; default norandmaps),
# CGV2VM_TRACE=1 (boot-phase timestamps on the console), CGV2VM_QUIET=1.
set -euo pipefail

CACHE=${CGV2VM_CACHE:-/var/cache/corral/cgv2vm}
INITRD_VERSION=3   # bump when the initramfs layout/init changes

die() { echo "run-in-cgv2-vm: $*" >&2; exit 125; }
note() { [ -n "${CGV2VM_QUIET:-}" ] || echo "run-in-cgv2-vm: $*" >&2; }

# ---------------------------------------------------------------- options
SHARES=()
if [ -n "${CGV2VM_SHARES:-}" ]; then IFS=: read -r -a SHARES <<<"$CGV2VM_SHARES"; fi
CWD=${CGV2VM_CWD:-$PWD}
MEM=${CGV2VM_MEM:-2G}
NCPU=$(nproc 2>/dev/null || echo 1)
SMP=${CGV2VM_SMP:-$(( NCPU > 4 ? 4 : NCPU ))}
TIMEOUT=${CGV2VM_TIMEOUT:-900}
CGROUP=${CGV2VM_CGROUP:-}
CONTROLLERS=${CGV2VM_CONTROLLERS:-all}
ACCEL=${CGV2VM_ACCEL:-tcg}
CONSOLE=${CGV2VM_CONSOLE:-}
MERGE_STDERR=${CGV2VM_MERGE_STDERR:-}
APPEND_EXTRA=${CGV2VM_APPEND:-}
PREPARE_ONLY=
ROOT=${CGV2VM_ROOT:-/}
BOOT=${CGV2VM_BOOT:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --share) SHARES+=("$2"); shift 2 ;;
    --cwd) CWD=$2; shift 2 ;;
    --mem) MEM=$2; shift 2 ;;
    --smp) SMP=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --cgroup) CGROUP=$2; shift 2 ;;
    --controllers) CONTROLLERS=$2; shift 2 ;;
    --accel) ACCEL=$2; shift 2 ;;
    --console) CONSOLE=1; shift ;;
    --merge-stderr) MERGE_STDERR=1; shift ;;
    --kernel-cmdline) APPEND_EXTRA=$2; shift 2 ;;
    --prepare) PREPARE_ONLY=1; shift ;;
    --root) ROOT=$2; shift 2 ;;
    --boot-systemd) BOOT=systemd; shift ;;
    --kernel-suite) export CGV2VM_KERNEL_SUITE=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
[ -n "$PREPARE_ONLY" ] || [ $# -gt 0 ] || die "usage: $0 [options] [--] /path/to/exe [args...]  (--help)"
[ ${#SHARES[@]} -gt 0 ] || SHARES=("$PWD")

# ---------------------------------------------------------------- host tools
as_root_apt() {
  [ -z "${CGV2VM_NO_INSTALL:-}" ] || die "$* needed but CGV2VM_NO_INSTALL is set"
  [ "$(id -u)" = 0 ] || die "need root to apt-get install: $*"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq "$@" >/dev/null \
    || die "apt-get $* failed"
}
apt_lists_ok=
apt_update_once() {
  [ -n "$apt_lists_ok" ] && return 0
  if ! apt-cache show linux-image-amd64 >/dev/null 2>&1; then
    note "apt-get update"
    as_root_apt update
  fi
  apt_lists_ok=1
}
# CGV2VM_KERNEL_SUITE=backports (or any suite name) takes the kernel from that
# suite of the system's own Debian mirror, through private apt lists under the
# cache: the host's apt configuration is not touched.
KAPT=()
kernel_apt_setup() {
  local suite=${CGV2VM_KERNEL_SUITE:-}
  [ -n "$suite" ] || return 0
  [ ${#KAPT[@]} = 0 ] || return 0
  local codename uri d
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  [ "$suite" != backports ] || suite=$codename-backports
  apt_update_once
  uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null | awk -v c="$codename" '$2 == c {print $1; exit}')
  [ -n "$uri" ] || die "cannot find the Debian mirror of $codename in the apt configuration"
  d="$CACHE/apt-$suite"; mkdir -p "$d/lists/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $suite main" > "$d/sources.list"
  KAPT=(-o "Dir::Etc::SourceList=$d/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$d/lists")
  note "apt-get update ($suite, private lists)"
  apt-get "${KAPT[@]}" -qq update >/dev/null || die "apt-get update of $suite failed"
}
ensure_qemu() {
  command -v qemu-system-x86_64 >/dev/null && return 0
  note "installing qemu-system-x86 (apt)"
  apt_update_once
  as_root_apt install -y --no-install-recommends qemu-system-x86
}

# Download a .deb and unpack it under $2 (no dpkg install: nothing on the host changes).
fetch_deb() { # pkg destdir [apt options...]
  local pkg=$1 dest=$2 dl="$CACHE/dl"; shift 2
  mkdir -p "$dl" "$dest.tmp"
  apt_update_once
  ( cd "$dl" && rm -f "${pkg}"_*.deb && apt-get "$@" download -qq "$pkg" 2>/dev/null ) \
    || die "apt-get download $pkg failed"
  dpkg-deb -x "$dl/${pkg}"_*.deb "$dest.tmp"
  rm -f "$dl/${pkg}"_*.deb
  rm -rf "$dest"; mv "$dest.tmp" "$dest"
}

# ---------------------------------------------------------------- kernel
ensure_kernel() {
  local pkg=${CGV2VM_KERNEL_PKG:-} pkgfile="$CACHE/kernel${CGV2VM_KERNEL_SUITE:+-$CGV2VM_KERNEL_SUITE}.pkg"
  if [ -z "$pkg" ]; then
    if [ -f "$pkgfile" ] && [ -z "${CGV2VM_REFRESH:-}" ]; then
      pkg=$(cat "$pkgfile")
    else
      apt_update_once; kernel_apt_setup
      pkg=$(apt-cache "${KAPT[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
      [ -n "$pkg" ] || die "cannot resolve linux-image-amd64"
    fi
  fi
  KDIR="$CACHE/$pkg"
  if [ ! -f "$KDIR/vmlinux" ]; then
    note "fetching kernel $pkg"
    kernel_apt_setup
    fetch_deb "$pkg" "$KDIR.x" "${KAPT[@]}"
    rm -rf "$KDIR"; mkdir -p "$KDIR"
    local vmlinuz; vmlinuz=$(ls "$KDIR.x"/boot/vmlinuz-* | head -1)
    KVER=${vmlinuz##*/vmlinuz-}
    mkdir -p "$KDIR/lib/modules"
    mv "$KDIR.x/lib/modules/$KVER" "$KDIR/lib/modules/$KVER"
    cp "$KDIR.x/boot/config-$KVER" "$KDIR/config"
    # Uncompressed ELF vmlinux: QEMU boots it via the PVH entry point, which
    # skips the BIOS and the in-guest decompression (~2.5 s faster on TCG).
    # bookworm's kernel is xz-compressed, later ones zstd.
    local off
    off=$(LC_ALL=C grep -aboP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1 || true)
    if [ -n "$off" ]; then
      tail -c +$((off + 1)) "$vmlinuz" | xz -dc > "$KDIR/vmlinux.tmp" 2>/dev/null || true
    else
      off=$(LC_ALL=C grep -aboP '\x28\xb5\x2f\xfd' "$vmlinuz" | head -1 | cut -d: -f1 || true)
      [ -n "$off" ] || die "no xz/zstd payload in $vmlinuz"
      command -v zstd >/dev/null || { apt_update_once; as_root_apt install -y --no-install-recommends zstd; }
      tail -c +$((off + 1)) "$vmlinuz" | zstd -dcq > "$KDIR/vmlinux.tmp" 2>/dev/null || true
    fi
    [ "$(head -c 4 "$KDIR/vmlinux.tmp" | od -An -c | tr -d ' ')" = '177ELF' ] || die "vmlinux extraction failed"
    rm -rf "$KDIR.x"
    echo "$KVER" > "$KDIR/kver"
    # drop hardware drivers a VM never needs (433 MB -> ~130 MB); keeps fs, net,
    # netfilter, block (loop, nbd, zram), md/dm, virtio, tun/veth/macvlan/...
    if [ -z "${CGV2VM_KEEP_ALL_MODULES:-}" ]; then
      local k="$KDIR/lib/modules/$KVER/kernel"
      rm -rf "$k/sound" "$k"/drivers/{gpu,media,scsi,usb,infiniband,iio,staging,hwmon,hid,comedi,input,platform,ata,bluetooth,isdn,mmc,mtd,nfc,thunderbolt,video,w1,leds,power,pcmcia,firewire,edac,mfd,i2c,spi,gnss,fpga,misc,ptp,ntb,regulator,counter,rtc} \
             "$k"/drivers/net/{wireless,ethernet,usb,can,wwan,phy,ieee802154,hamradio,arcnet,fddi,plip,slip,ppp,wan} "$k"/net/{bluetooth,wireless,mac80211,mac802154,nfc}
    fi
    busybox_path >/dev/null
    "$BUSYBOX" depmod -b "$KDIR" "$KVER" || die "depmod failed"
    mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux"
  fi
  KVER=$(cat "$KDIR/kver")
  [ -n "${CGV2VM_KERNEL_PKG:-}" ] || echo "$pkg" > "$pkgfile"
}

BUSYBOX=
busybox_path() {
  [ -n "$BUSYBOX" ] && { echo "$BUSYBOX"; return; }
  if [ -x "$CACHE/busybox/bin/busybox" ]; then BUSYBOX="$CACHE/busybox/bin/busybox"
  elif [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; then BUSYBOX=/bin/busybox
  else
    note "fetching busybox-static"
    fetch_deb busybox-static "$CACHE/busybox"
    BUSYBOX="$CACHE/busybox/bin/busybox"
  fi
  echo "$BUSYBOX"
}

# ---------------------------------------------------------------- initramfs
# Modules needed before the module tree (shared over 9p) is reachable.
EARLY_MODULES="virtio_console 9pnet_virtio 9p"   # + virtio_mmio or virtio_pci

write_init() {
cat <<'EOF'
#!/bin/busybox sh
# PID 1 of the cgv2vm initramfs: bring up 9p, then hand over to the per-run
# stage script that the host wrote into the control share.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
bus=virtio_mmio; grep -q 'cgv2vm.pci' /proc/cmdline && bus=virtio_pci
for m in $bus $(cat /early-modules); do modprobe "$m" || echo "cgv2vm: modprobe $m failed"; done
mkdir -p /ctl
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none cgv2ctl /ctl; then
  echo "cgv2vm: cannot mount control share"; poweroff -f
fi
exec /bin/busybox sh /ctl/stage1.sh
EOF
}

ensure_initrd() {
  local sig; sig=$( { echo "$INITRD_VERSION $KVER $EARLY_MODULES"; write_init; } | md5sum | cut -c1-12)
  INITRD="$CACHE/initrd-$KVER-$sig.cpio.gz"
  [ -f "$INITRD" ] && return 0
  note "building initramfs"
  rm -f "$CACHE"/initrd-"$KVER"-*.cpio.gz   # stale builds for this kernel
  local bb; bb=$(busybox_path)
  local r; r=$(mktemp -d "$CACHE/initrd.XXXXXX")
  mkdir -p "$r"/{bin,sbin,proc,sys,dev,tmp,lib/modules/"$KVER"}
  cp "$bb" "$r/bin/busybox"
  ln -s ../bin/busybox "$r/sbin/modprobe"
  write_init > "$r/init"; chmod 755 "$r/init"
  echo "$EARLY_MODULES" > "$r/early-modules"
  # copy the early modules and their dependencies (from modules.dep)
  local dep="$KDIR/lib/modules/$KVER/modules.dep" todo m f seen=" "
  todo=$(for m in virtio_mmio virtio_pci $EARLY_MODULES; do grep -E "/${m}\.ko(\.xz|\.zst)?:" "$dep"; done | tr -d ':')
  for f in $todo; do
    case "$seen" in *" $f "*) continue ;; esac; seen="$seen$f "
    mkdir -p "$r/lib/modules/$KVER/$(dirname "$f")"
    case "$f" in
      *.ko.xz) xz -dc "$KDIR/lib/modules/$KVER/$f" > "$r/lib/modules/$KVER/${f%.xz}" ;;
      *.ko.zst) zstd -dcq "$KDIR/lib/modules/$KVER/$f" > "$r/lib/modules/$KVER/${f%.zst}" ;;
      *) cp "$KDIR/lib/modules/$KVER/$f" "$r/lib/modules/$KVER/$f" ;;
    esac
  done
  cp "$KDIR/lib/modules/$KVER/modules.order" "$KDIR/lib/modules/$KVER/modules.builtin" "$r/lib/modules/$KVER/" 2>/dev/null || true
  "$bb" depmod -b "$r" "$KVER" || die "depmod (initramfs) failed"
  ( cd "$r" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1 ) > "$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"
  rm -rf "$r"
}

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"; flock 9          # one builder at a time
ensure_qemu
ensure_kernel
ensure_initrd
flock -u 9; exec 9>&-
if [ -n "$PREPARE_ONLY" ]; then note "ready: $KDIR/vmlinux $INITRD"; exit 0; fi

# ---------------------------------------------------------------- per-run control dir
CTL=$(mktemp -d "${TMPDIR:-/tmp}/cgv2vm.XXXXXX")
cleanup() { rm -rf "$CTL"; }
trap cleanup EXIT

sane_path() { case "$1" in /*) ;; *) return 1 ;; esac; [[ "$1" != *[[:space:]\'\"\\\$\`]* ]]; }

# argv and environment as bash source, quoted with printf %q (run by the host's bash in the guest)
{
  echo "# generated by run-in-cgv2-vm.sh"
  while IFS= read -r name; do
    case "$name" in
      BASH*|SHELLOPTS|EUID|UID|PPID|SHLVL|_|OLDPWD|PWD|HOSTNAME|TMPDIR|CGV2VM_*) continue ;;
    esac
    printf 'export %s=%q\n' "$name" "${!name}"
  done < <(compgen -e)
  echo "export CGV2VM_GUEST=1"
  printf 'cd -- %q || exit 126\n' "$CWD"
  printf 'exec'; printf ' %q' "$@"; printf '\n'
} > "$CTL/cmd.sh"

{
  echo "KVER=$KVER"
  echo "CGROUP='${CGROUP//\'/}'"
  echo "CONTROLLERS='${CONTROLLERS//\'/}'"
  echo "NSHARES=${#SHARES[@]}"
  echo "TRACE=${CGV2VM_TRACE:-}"
  echo "OVERLAY=${CGV2VM_OVERLAY:-1}"
  echo "ROOTCACHE=${CGV2VM_ROOT_CACHE:-loose}"
  echo "BOOT=$BOOT"
} > "$CTL/config"
if [ "$BOOT" = systemd ]; then
  [ -x "$ROOT/lib/systemd/systemd" ] || die "--boot-systemd: $ROOT/lib/systemd/systemd is missing"
  APPEND_EXTRA="systemd.show_status=0 systemd.log_level=warning systemd.firstboot=0 $APPEND_EXTRA"
fi

# The guest's TSC ticks at the host's TSC rate under TCG. Telling the kernel that
# rate (tsc_early_khz) avoids PIT calibration, which fails when the host is busy
# and then (microvm has no HPET/ACPI PM timer to fall back on) hangs the boot.
host_tsc_khz() {   # cached per host boot (dmesg may have rotated since)
  local mhz='' boot; boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo none)
  if [ -f "$CACHE/tsc_khz" ] && [ "$(cut -d' ' -f1 "$CACHE/tsc_khz")" = "$boot" ]; then
    cut -d' ' -f2 "$CACHE/tsc_khz"; return
  fi
  mhz=$(dmesg 2>/dev/null | sed -n 's/.*tsc: Refined TSC clocksource calibration: \([0-9.]*\) MHz.*/\1/p' | tail -1)
  [ -n "$mhz" ] || mhz=$(dmesg 2>/dev/null | sed -n 's/.*tsc: Detected \([0-9.]*\) MHz \(processor\|TSC\).*/\1/p' | tail -1)
  if [ -z "$mhz" ] && grep -qw constant_tsc /proc/cpuinfo && grep -qw hypervisor /proc/cpuinfo; then
    mhz=$(awk -F: '/^cpu MHz/{gsub(/ /,"",$2); print $2; exit}' /proc/cpuinfo)
  fi
  [ -n "$mhz" ] || return 0
  mhz=$(awk -v m="$mhz" 'BEGIN{printf "%d\n", m*1000 + 0.5}')
  echo "$boot $mhz" > "$CACHE/tsc_khz"; echo "$mhz"
}
TSC_KHZ=${CGV2VM_TSC_KHZ:-$(host_tsc_khz)}
MACHINE=${CGV2VM_MACHINE:-}
if [ -z "$MACHINE" ]; then
  # microvm boots ~0.5 s faster than q35 but needs a known TSC rate (see above)
  if [ -n "$TSC_KHZ" ]; then MACHINE=microvm; else MACHINE=q35; fi
fi
[ -z "$TSC_KHZ" ] || APPEND_EXTRA="tsc_early_khz=$TSC_KHZ $APPEND_EXTRA"
# No ASLR by default: TCG caches translated code by virtual address, so with fixed
# library addresses every exec reuses it (each exec ~2-4x cheaper). CGV2VM_ASLR=1 keeps ASLR.
[ -n "${CGV2VM_ASLR:-}" ] || APPEND_EXTRA="norandmaps $APPEND_EXTRA"
case "$MACHINE" in
  microvm) VDEV=device; MOPT="microvm,x-option-roms=off,rtc=on" ;;
  pc|q35) VDEV=pci; MOPT="$MACHINE"; APPEND_EXTRA="cgv2vm.pci $APPEND_EXTRA" ;;
  *) die "CGV2VM_MACHINE must be microvm, q35 or pc" ;;
esac
fsdev_n=0
virtfs() { # path tag extra-opts
  QEMU_ARGS+=(-fsdev "local,id=fs$fsdev_n,path=$1,security_model=none${3:+,$3}"
              -device "virtio-9p-$VDEV,fsdev=fs$fsdev_n,mount_tag=$2")
  fsdev_n=$((fsdev_n + 1))
}
QEMU_ARGS=(
  -machine "$MOPT" -nodefaults -no-user-config -display none -no-reboot
  -m "$MEM" -smp "$SMP"
  -kernel "$KDIR/vmlinux" -initrd "$INITRD"
  -append "console=ttyS0 quiet loglevel=4 panic=-1 oops=panic random.trust_cpu=on tsc=reliable no_timer_check cryptomgr.notests initcall_blacklist=crypto_kdf108_init,init_kprobe_trace,jent_mod_init i8042.noaux i8042.nokbd i8042.nopnp $APPEND_EXTRA"
  -serial "file:$CTL/console.log"
  -device "virtio-serial-$VDEV,id=vser0"
  -chardev stdio,id=out,signal=on -device virtconsole,chardev=out,name=out
)
virtfs "$CTL" cgv2ctl
virtfs "$ROOT" cgv2root readonly=on,multidevs=remap
virtfs "$KDIR/lib/modules/$KVER" cgv2mod readonly=on
# stderr gets its own virtio console port. A tty is reopened by name; a pipe or
# file (write-only) is handed over as an fd so that QEMU writes through the very
# same open file (offsets stay right); anything else is merged into stdout.
err_acc=$(( 8#$(awk '/^flags:/{print $2}' /proc/self/fdinfo/2 2>/dev/null || echo 0) & 3 ))
if [ -n "$MERGE_STDERR" ]; then :
elif [ -t 2 ]; then
  QEMU_ARGS+=(-chardev "file,id=err,path=/proc/self/fd/2,append=on")
elif [ "$err_acc" = 1 ]; then
  exec 8>&2
  QEMU_ARGS+=(-add-fd fd=8,set=8 -chardev "file,id=err,path=/dev/fdset/8,append=on")
fi
if [ -z "$MERGE_STDERR" ] && { [ -t 2 ] || [ "$err_acc" = 1 ]; }; then
  QEMU_ARGS+=(-device virtconsole,chardev=err,name=err)
  echo "ERRPORT=1" >> "$CTL/config"
fi
i=0
for s in "${SHARES[@]}"; do
  s=$(cd "$s" && pwd -P) || die "cannot share $s"
  sane_path "$s" || die "share path must be absolute without spaces/quotes: $s"
  [ "$s" != / ] || die "refusing to share / read-write"
  virtfs "$s" "cgv2s$i" multidevs=remap
  echo "SHARE$i=$s" >> "$CTL/config"
  i=$((i + 1))
done

case "$ACCEL" in
  kvm) QEMU_ARGS+=(-accel kvm -cpu host) ;;
  tcg) QEMU_ARGS+=(-accel "tcg,thread=multi${CGV2VM_TCG_OPTS:-}" -cpu max) ;;
  *) die "--accel must be tcg or kvm" ;;
esac

write_stage1() {
cat <<'EOF'
#!/bin/busybox sh
# stage 1: PID 1 in the initramfs (written per run by run-in-cgv2-vm.sh).
# Builds the new root: overlay(host / via 9p, tmpfs) + pseudo filesystems +
# read-write shares, then moves it onto / (like switch_root, so that the
# command is not "chrooted" - unshare(CLONE_NEWUSER) refuses chrooted callers).
. /ctl/config
say() { echo "cgv2vm: $*" > /dev/ttyS0; }
if [ -n "$TRACE" ]; then mark() { read -r up _ < /proc/uptime; echo "cgv2vm: t=$up $*" > /dev/ttyS0; }; else mark() { :; }; fi
mark stage1
fail() { say "FAILED: $*"; echo 125 > /ctl/rc; poweroff -f; sleep 5; }
echo -1000 > /proc/self/oom_score_adj
P9="trans=virtio,version=9p2000.L,msize=262144"
mount -t 9p -o "$P9,ro,cache=loose" cgv2mod /lib/modules/$KVER || fail "mount modules"
mkdir -p /host /ovl /newroot
mount -t 9p -o "$P9,ro,cache=${ROOTCACHE:-loose}" cgv2root /host || fail "mount host root"
mount -t tmpfs -o mode=755 tmpfs /ovl && mkdir -p /ovl/u /ovl/w
modprobe overlay
if [ "$OVERLAY" = 0 ] || ! mount -t overlay -o lowerdir=/host,upperdir=/ovl/u,workdir=/ovl/w overlay /newroot 2>/dev/null; then
  say "overlay root failed, using read-only root"
  mount -o bind /host /newroot || fail "bind root"
fi
R=/newroot
mark root-mounted
mount -t proc proc $R/proc || fail "proc"
mount -t sysfs sysfs $R/sys || fail "sysfs"
if [ "$BOOT" = systemd ]; then
  # systemd mounts the rest (cgroup2, /run, /dev/shm, ...) itself. The control share, a busybox
  # for modprobe and poweroff, and a oneshot unit that runs the command go where /run and /tmp
  # cannot hide them.
  mount -t devtmpfs devtmpfs $R/dev || fail "devtmpfs"
  # the static nodes that kmod and udev would make (a minbase tree has neither)
  mkdir -p $R/dev/net $R/dev/mapper
  { mknod $R/dev/net/tun c 10 200; mknod $R/dev/fuse c 10 229; mknod $R/dev/loop-control c 10 237
    mknod $R/dev/mapper/control c 10 236; } 2>/dev/null
  mkdir -p $R/.cgv2vm/ctl $R/.cgv2vm/bin && mount -o bind /ctl $R/.cgv2vm/ctl || fail "bind ctl"
  cp /bin/busybox $R/.cgv2vm/bin/busybox
  for a in sh modprobe poweroff sync cat; do ln -s busybox $R/.cgv2vm/bin/$a; done
  mkdir -p $R/lib/modules/$KVER 2>/dev/null && mount -o bind /lib/modules/$KVER $R/lib/modules/$KVER 2>/dev/null
  echo /.cgv2vm/bin/modprobe > /proc/sys/kernel/modprobe
  i=0
  while [ $i -lt $NSHARES ]; do
    eval "s=\$SHARE$i"
    mkdir -p "$R$s" 2>/dev/null
    mount -t 9p -o "$P9,cache=mmap" cgv2s$i "$R$s" || fail "mount share $s"
    i=$((i + 1))
  done
  U=$R/etc/systemd/system
  mkdir -p $U/multi-user.target.wants
  cat > $U/cgv2vm-command.service <<UNIT
[Unit]
Description=the command of run-in-cgv2-vm.sh
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/.cgv2vm/bin/sh /.cgv2vm/ctl/systemd-stage.sh
[Install]
WantedBy=multi-user.target
UNIT
  ln -s ../cgv2vm-command.service $U/multi-user.target.wants/cgv2vm-command.service
  echo cgv2vm > $R/etc/hostname
  mark systemd
  cd $R || fail "cd newroot"
  mount --move . / || fail "move root"
  exec chroot . /lib/systemd/systemd
fi
mount -t cgroup2 -o nsdelegate cgroup2 $R/sys/fs/cgroup || fail "cgroup2"
mount -t bpf bpf $R/sys/fs/bpf 2>/dev/null
mount -t devtmpfs devtmpfs $R/dev || fail "devtmpfs"
mkdir -p $R/dev/pts $R/dev/shm $R/dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts $R/dev/pts
ln -sf pts/ptmx $R/dev/ptmx 2>/dev/null
# static nodes whose first open autoloads the driver (what kmod static-nodes does)
mkdir -p $R/dev/net $R/dev/mapper
{ mknod $R/dev/net/tun c 10 200; mknod $R/dev/fuse c 10 229; mknod $R/dev/loop-control c 10 237
  mknod $R/dev/mapper/control c 10 236; mknod $R/dev/vhost-net c 10 238; mknod $R/dev/uinput c 10 223; } 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t mqueue mqueue $R/dev/mqueue 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=755 tmpfs $R/run
mkdir -p $R/run/cgv2vm $R/run/cgv2vm-bin && mount -o bind /ctl $R/run/cgv2vm
cp /bin/busybox $R/run/cgv2vm-bin/busybox
for a in sh cat mkfifo stty sync poweroff modprobe echo ln rm mkdir sleep; do ln -s busybox $R/run/cgv2vm-bin/$a; done
# module autoloading (request_module) uses busybox modprobe + the shared module tree
mkdir -p $R/lib/modules/$KVER 2>/dev/null && mount -o bind /lib/modules/$KVER $R/lib/modules/$KVER 2>/dev/null
echo /run/cgv2vm-bin/modprobe > /proc/sys/kernel/modprobe
i=0
while [ $i -lt $NSHARES ]; do
  eval "s=\$SHARE$i"
  mkdir -p "$R$s" 2>/dev/null   # corral: a share under /tmp or /run lies in a fresh tmpfs here
  mount -t 9p -o "$P9,cache=mmap" cgv2s$i "$R$s" || fail "mount share $s"
  i=$((i + 1))
done
mark shares-mounted
# cgroup v2: enable controllers at the root (as systemd would)
CG=$R/sys/fs/cgroup
case "$CONTROLLERS" in
  none) ;;
  all) for c in $(cat $CG/cgroup.controllers); do echo "+$c" > $CG/cgroup.subtree_control || say "cannot enable $c"; done ;;
  *) for c in $CONTROLLERS; do echo "+$c" > $CG/cgroup.subtree_control || say "cannot enable $c"; done ;;
esac
hostname cgv2vm
ip link set lo up
cd $R || fail "cd newroot"
mount --move . / || fail "move root"
exec chroot . /run/cgv2vm-bin/sh /run/cgv2vm/stage2.sh
EOF
}
write_stage2() {
cat <<'EOF'
# stage 2: PID 1 in the new root. Runs the command, reports its status, powers off.
export PATH=/run/cgv2vm-bin
. /run/cgv2vm/config
if [ -n "$TRACE" ]; then mark() { read -r up _ < /proc/uptime; echo "cgv2vm: t=$up $*" > /dev/ttyS0; }; else mark() { :; }; fi
# output relays: the command writes to pipes (as under CI); we copy to the virtio consoles
# (hvc resets termios on last close, so set raw mode while the relay holds it open)
mkfifo /run/cgv2vm-bin/o /run/cgv2vm-bin/e
cd /run/cgv2vm-bin
( stty -F /dev/hvc0 raw -echo; exec cat o ) > /dev/hvc0 2>/dev/ttyS0 &
if [ -n "$ERRPORT" ]; then ( stty -F /dev/hvc1 raw -echo; exec cat e ) > /dev/hvc1 2>/dev/ttyS0 &
else rm e; ln -s o e; fi   # merged: both into one fifo, order kept
cd /
mark exec
CGPROCS=
[ -z "$CGROUP" ] || { mkdir -p "/sys/fs/cgroup/$CGROUP"; CGPROCS=/sys/fs/cgroup/$CGROUP/cgroup.procs; }
CGPROCS=$CGPROCS sh -c '[ -z "$CGPROCS" ] || echo $$ > "$CGPROCS" || exit 125
  echo 0 > /proc/self/oom_score_adj; exec /bin/bash /run/cgv2vm/cmd.sh' \
  </dev/null >/run/cgv2vm-bin/o 2>/run/cgv2vm-bin/e
rc=$?
wait
mark done
echo $rc > /run/cgv2vm/rc
sync
poweroff -f
EOF
}
write_stage1 > "$CTL/stage1.sh"
write_stage2 > "$CTL/stage2.sh"
# --boot-systemd: what the oneshot unit runs. The exit status is written last (rc is what the
# host waits for), then the guest powers off at once.
cat > "$CTL/systemd-stage.sh" <<'EOF'
/bin/bash /.cgv2vm/ctl/cmd.sh > /.cgv2vm/ctl/output 2>&1 < /dev/null
echo $? > /.cgv2vm/ctl/rc
/.cgv2vm/bin/sync
/.cgv2vm/bin/poweroff -f
EOF

note "booting ($ACCEL, $SMP cpu, $MEM) kernel $KVER"
set +e
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 "${QEMU_ARGS[@]}" </dev/null
qrc=$?
set -e
[ "$BOOT" != systemd ] || [ ! -f "$CTL/output" ] || cat "$CTL/output"
if [ -n "$CONSOLE" ] || [ ! -f "$CTL/rc" ]; then
  echo "----- guest console -----" >&2; cat "$CTL/console.log" >&2 2>/dev/null; echo "-------------------------" >&2
fi
if [ $qrc = 124 ] || [ $qrc = 137 ]; then note "timeout after ${TIMEOUT}s"; exit 124; fi
[ -f "$CTL/rc" ] || die "guest did not report an exit status (qemu rc=$qrc)"
exit "$(cat "$CTL/rc")"
