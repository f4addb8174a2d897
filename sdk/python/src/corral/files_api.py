"""Files in a sandbox (docs/PROTOCOL.md "Files": read, write, stat, list, mkdir, remove, rename,
tar archives up and down) and git on a repository there ("Git": the work tree's diff, a bundle of
its commits). Paths are absolute paths inside the sandbox."""
from __future__ import annotations

import io
import os
import tarfile
from typing import Any

from .http_api import HttpApi, enc, query
from .models import DirEntry, FileStat, GitDiff, WrittenFile
from .tar_extract import extract


class FilesApi(HttpApi):
    def _fs(self, sandbox: str, verb: str, **params: Any) -> str:
        return f"/v1/sandboxes/{enc(sandbox)}/fs/{verb}{query(params)}"

    async def read_file(self, sandbox: str, path: str) -> bytes:
        return (await self._send("GET", self._fs(sandbox, "read", path=path))).content

    async def read_text(self, sandbox: str, path: str, encoding: str = "utf-8") -> str:
        return (await self.read_file(sandbox, path)).decode(encoding)

    async def write_file(self, sandbox: str, path: str, data: str | bytes, *, mode: int | None = None,
                         append: bool = False) -> WrittenFile:
        """Creates or truncates (or appends to) a regular file; its parent must exist. mode: e.g. 0o600."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        path_query = self._fs(sandbox, "write", path=path, mode=None if mode is None else format(mode, "04o"),
                              append=True if append else None)
        response = await self._send("PUT", path_query, raw, "application/octet-stream")
        return WrittenFile.from_json(response.json())

    async def stat(self, sandbox: str, path: str) -> FileStat:
        """A symlink is not followed."""
        return FileStat.from_json(await self._request("GET", self._fs(sandbox, "stat", path=path)))

    async def list_dir(self, sandbox: str, path: str) -> list[DirEntry]:
        reply = await self._request("GET", self._fs(sandbox, "list", path=path))
        return [DirEntry.from_json(e) for e in reply["entries"]]

    async def mkdir(self, sandbox: str, path: str, *, parents: bool = False, mode: int | None = None) -> None:
        await self._request("POST", self._fs(sandbox, "mkdir", path=path, parents=True if parents else None,
                                             mode=None if mode is None else format(mode, "04o")))

    async def remove(self, sandbox: str, path: str, *, recursive: bool = False) -> None:
        await self._request("POST", self._fs(sandbox, "remove", path=path, recursive=True if recursive else None))

    async def rename(self, sandbox: str, source: str, target: str) -> None:
        await self._request("POST", self._fs(sandbox, "rename", **{"from": source, "to": target}))

    # ---- tar archives ----

    async def download_tar(self, sandbox: str, path: str) -> bytes:
        """A tar archive of the directory's contents."""
        return (await self._send("GET", self._fs(sandbox, "tar", path=path))).content

    async def upload_tar(self, sandbox: str, path: str, archive: bytes) -> int:
        """Extracts a tar archive into the directory (regular files, directories and symlinks; no
        entry may leave it). Returns how many entries it held."""
        response = await self._send("PUT", self._fs(sandbox, "tar", path=path), bytes(archive), "application/x-tar")
        return int(response.json().get("entries", 0))

    async def upload_dir(self, sandbox: str, local_dir: str, path: str) -> int:
        """Copies a local directory's contents into the sandbox's directory `path` (one tar)."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for name in sorted(os.listdir(local_dir)):
                archive.add(os.path.join(local_dir, name), arcname=name)
        return await self.upload_tar(sandbox, path, buffer.getvalue())

    async def download_dir(self, sandbox: str, path: str, local_dir: str) -> list[str]:
        """Copies the sandbox's directory `path` into a local directory; returns the names
        written. The archive is the sandbox's, so it is not trusted (corral.tar_extract): an entry
        that would leave local_dir (an absolute name, `..`, a write through a symlink, a link
        pointing out) or a device node stops it with UnsafeArchiveError (a ValueError); modes
        lose setuid/setgid bits and files are owned by the caller."""
        data = await self.download_tar(sandbox, path)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            return extract(archive, local_dir)

    # ---- git ----

    async def git_diff(self, sandbox: str, path: str | None = None, base: str | None = None) -> GitDiff:
        """The work tree (untracked files included) against `base` (default HEAD) of the
        repository at `path` (default /home/agent/repo), without touching its index."""
        return GitDiff.from_json(await self._request(
            "GET", f"/v1/sandboxes/{enc(sandbox)}/git/diff{query({'path': path, 'base': base})}"))

    async def git_bundle(self, sandbox: str, path: str | None = None, base: str | None = None) -> bytes:
        """A git bundle of base..HEAD (everything HEAD reaches without base): `git fetch FILE` takes it."""
        response = await self._send("GET", f"/v1/sandboxes/{enc(sandbox)}/git/bundle{query({'path': path, 'base': base})}")
        return response.content
