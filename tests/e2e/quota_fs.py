"""File systems with project quotas for end-to-end tests: a daemon whose state dir is on one caps
sandboxes' writable layers by project quota (rootfs/project_quota.h).

    ok, reason = have_xfs()                    # or have_quota_fs("ext4")
    if not ok:
        self.skipTest(reason)
    with xfs_state_dir(tmp) as state_dir:      # tmp/xfs, mounted with prjquota
        ...                                    # or quota_state_dir(tmp, "ext4")

The image is a sparse file in the given directory, mounted through a loop device that clears
itself (mount -o loop sets LO_FLAGS_AUTOCLEAR) when the file system is unmounted. Nothing here
touches a mount or loop device it did not make.
"""
import contextlib
import gzip
import os
import platform
import shutil
import subprocess
import tempfile

TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _tool(name):
    return shutil.which(name, path=TOOL_PATH)


def _kernel_config_says(option):
    """'y'/'m' when the running kernel's config sets `option`, 'n' when it says it is not set,
    None when no config can be read (then nothing is assumed)."""
    release = platform.release()
    for path in ("/proc/config.gz", f"/boot/config-{release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as config:
                for line in config:
                    if line.startswith(option + "="):
                        return line.strip().split("=", 1)[1]
                    if line.strip() == f"# {option} is not set":
                        return "n"
            return "n"  # a config that does not mention it at all
        except OSError:
            continue
    return None


def _kernel_has_xfs():
    with open("/proc/filesystems") as filesystems:
        if any(line.split()[-1] == "xfs" for line in filesystems if line.strip()):
            return True
    # A module is listed in /proc/filesystems only once loaded; mount loads it on demand.
    modules = f"/lib/modules/{platform.release()}/kernel/fs/xfs"
    return os.path.isdir(modules) and any(name.startswith("xfs.ko") for name in os.listdir(modules))


def have_xfs():
    """(True, "") when xfs_state_dir can work here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "needs root (mount, loop devices)"
    if not _tool("mkfs.xfs"):
        return False, "mkfs.xfs is not installed (xfsprogs)"
    if not _tool("mount"):
        return False, "mount(8) is not installed (util-linux)"
    if not _kernel_has_xfs():
        return False, "the kernel has no xfs (not in /proc/filesystems, no xfs module)"
    # Without it XFS mounts, but refuses prjquota ("quota support not available in this kernel").
    if _kernel_config_says("CONFIG_XFS_QUOTA") == "n":
        return False, "the kernel's XFS has no quota support (built without CONFIG_XFS_QUOTA)"
    return True, ""


def have_quota_fs(kind):
    """have_xfs() for "xfs"; for "ext4" (made with -O quota,project), the same for ext4, whose
    quota feature needs the kernel's CONFIG_QFMT_V2."""
    if kind == "xfs":
        return have_xfs()
    if os.geteuid() != 0:
        return False, "needs root (mount, loop devices)"
    if not _tool("mkfs.ext4"):
        return False, "mkfs.ext4 is not installed (e2fsprogs)"
    if _kernel_config_says("CONFIG_QFMT_V2") == "n":
        return False, "the kernel has no quota file format for ext4's quota feature (built without CONFIG_QFMT_V2)"
    return True, ""


def _run(argv):
    """Runs a tool; raises RuntimeError with what it said when it fails."""
    result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={"PATH": TOOL_PATH, "LC_ALL": "C"})
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {result.returncode}): {result.stdout.strip()}")
    return result.stdout


def _unmount(mount_point):
    """Unmounts; lazily when a plain unmount is refused (a file still open there, a process's
    cwd): the file system and its loop device then go when their last user does."""
    umount = _tool("umount") or "umount"
    plain = subprocess.run([umount, mount_point], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if plain.returncode == 0:
        return
    lazy = subprocess.run([umount, "-l", mount_point], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if lazy.returncode != 0:
        raise RuntimeError(f"umount {mount_point}: {plain.stderr.strip()}; umount -l: {lazy.stderr.strip()}")


# How each kind is made: mkfs.xfs needs at least 300 MB; ext4's project quotas need both features.
_MKFS = {"xfs": ["mkfs.xfs", "-q", "-f"], "ext4": ["mkfs.ext4", "-q", "-F", "-O", "quota,project"]}


@contextlib.contextmanager
def quota_state_dir(parent_dir, kind, size_mb=1024):
    """Makes a sparse image of `size_mb` MiB in parent_dir, formats it as `kind` ("xfs" or
    "ext4") with project quotas, mounts it with `-o loop,prjquota` on parent_dir/<kind> and yields
    that path; on exit (also on an exception) unmounts it and removes the image and the mount
    point."""
    mount_point = os.path.join(parent_dir, kind)
    if os.path.ismount(mount_point):
        raise RuntimeError(f"{mount_point} is already a mount point (not ours; left alone)")
    fd, image = tempfile.mkstemp(prefix=f"{kind}-", suffix=".img", dir=parent_dir)
    made_mount_point = False
    mounted = False
    try:
        os.ftruncate(fd, size_mb << 20)
        os.close(fd)
        fd = -1
        mkfs = _MKFS[kind]
        _run([_tool(mkfs[0]) or mkfs[0], *mkfs[1:], image])
        if not os.path.isdir(mount_point):
            os.mkdir(mount_point, 0o755)
            made_mount_point = True
        _run([_tool("mount") or "mount", "-t", kind, "-o", "loop,prjquota", image, mount_point])
        mounted = True
        yield mount_point
    finally:
        if fd >= 0:
            os.close(fd)
        try:
            if mounted:
                _unmount(mount_point)
        finally:
            if made_mount_point and not os.path.ismount(mount_point):
                os.rmdir(mount_point)
            os.unlink(image)


def xfs_state_dir(parent_dir, size_mb=1024):
    """quota_state_dir(parent_dir, "xfs", size_mb)."""
    return quota_state_dir(parent_dir, "xfs", size_mb)
