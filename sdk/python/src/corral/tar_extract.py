"""Extracting a tar archive from a sandbox (download_dir) into a local directory without letting
it write anywhere else: the archive comes from a sandbox, which runs whatever an agent made, so
every entry is treated as hostile. Each entry is checked as it is extracted, against the files
the entries before it made:

- names: relative, no `..` leaving the directory, no device, FIFO or other special file;
- nothing is written through a symlink: an entry's parent must be a real directory inside, and
  an existing symlink is never replaced or written into;
- a symlink's target and a hard link's source must resolve inside; after the last entry every
  symlink is checked again (a later entry may have changed what an earlier link's path meant)
  and one that now leads out is removed;
- modes lose setuid, setgid and sticky bits, files get the extracting user as owner (a root
  process would otherwise take the archive's owners).

The first refused entry stops the extraction with ValueError; what was extracted before it stays."""
from __future__ import annotations

import copy
import os
import tarfile
from typing import Any


# The checks are made here; Python's own extraction filters (3.12+, some 3.11) would warn or differ.
_TRUSTED: dict[str, Any] = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


class UnsafeArchiveError(ValueError):
    """An entry of the archive would leave the target directory (or is a special file)."""


def _inside(top: str, path: str) -> bool:
    return path == top or path.startswith(top + os.sep)


def _check(top: str, member: tarfile.TarInfo) -> tarfile.TarInfo:
    name = member.name
    if not name or "\0" in name or os.path.isabs(name):
        raise UnsafeArchiveError(f"download_dir: {name!r} is not a relative name")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise UnsafeArchiveError(f"download_dir: {name!r} is a device, FIFO or other special file")
    target = os.path.normpath(os.path.join(top, name))
    if not _inside(top, target):
        raise UnsafeArchiveError(f"download_dir: {name!r} leaves the directory")
    parent = os.path.dirname(target)
    if os.path.realpath(parent) != parent and _inside(top, parent):
        raise UnsafeArchiveError(f"download_dir: {name!r} would be written through a symlink")
    if os.path.islink(target):
        raise UnsafeArchiveError(f"download_dir: {name!r} would replace a symlink")
    if member.issym():
        if os.path.isabs(member.linkname) or not _inside(top, os.path.realpath(os.path.join(parent, member.linkname))):
            raise UnsafeArchiveError(f"download_dir: the symlink {name!r} points out of the directory")
    if member.islnk():
        source = os.path.normpath(os.path.join(top, member.linkname))
        if (os.path.isabs(member.linkname) or not _inside(top, source) or os.path.realpath(source) != source
                or not os.path.isfile(source)):
            raise UnsafeArchiveError(f"download_dir: the hard link {name!r} names no file of the directory")
    safe = copy.copy(member)
    safe.mode = (member.mode & 0o777) | (0o700 if member.isdir() else 0)
    safe.uid, safe.gid, safe.uname, safe.gname = os.getuid(), os.getgid(), "", ""
    return safe


def extract(archive: tarfile.TarFile, local_dir: str) -> list[str]:
    """Extracts every entry of the archive into local_dir (made if missing); returns their names."""
    os.makedirs(local_dir, exist_ok=True)
    top = os.path.realpath(local_dir)
    names: list[str] = []
    links: list[str] = []
    try:
        for member in archive:
            safe = _check(top, member)
            if os.path.normpath(os.path.join(top, member.name)) != top:  # "./": the directory itself keeps its mode
                archive.extract(safe, top, numeric_owner=True, **_TRUSTED)
            names.append(member.name)
            if member.issym():
                links.append(os.path.normpath(os.path.join(top, member.name)))
    finally:
        escaped = [link for link in links
                   if os.path.islink(link) and not _inside(top, os.path.realpath(link))]
        for link in escaped:
            os.unlink(link)
    if escaped:
        raise UnsafeArchiveError(f"download_dir: symlinks that lead out of the directory were removed: {escaped}")
    return names
