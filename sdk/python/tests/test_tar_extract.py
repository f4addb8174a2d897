"""download_dir's extraction (corral.tar_extract) of a hostile archive: the archive is the
sandbox's, so every way out of the target directory is tried (absolute names, `..`, symlinks
pointing out, writes through a symlink, symlink chains that only lead out once later entries
exist, hard links to files outside, device nodes, setuid bits, foreign owners), each beside a
parent directory's canary file that must stay untouched; and a positive control: an ordinary
archive with files, directories and relative symlinks inside (`../pkg/bin.js`) comes out whole.
No daemon: the archives are made here."""
import io
import os
import shutil
import stat
import tarfile
import tempfile
import unittest

from corral import UnsafeArchiveError
from corral.tar_extract import extract


def archive(*entries):
    """entries: (name, kind, value): kind file (value: bytes), dir, sym or lnk (value: the link's name)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, value, *mode in entries:
            info = tarfile.TarInfo(name)
            info.mode = mode[0] if mode else 0o644
            info.uid, info.gid, info.uname, info.gname = 4242, 4242, "mallory", "mallory"
            if kind == "file":
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "lnk": tarfile.LNKTYPE,
                         "chr": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            if kind in ("sym", "lnk"):
                info.linkname = value
            tar.addfile(info)
    buffer.seek(0)
    return tarfile.open(fileobj=buffer, mode="r")


class TarExtract(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="corral-tar-")
        self.addCleanup(shutil.rmtree, self.root, True)
        self.target = os.path.join(self.root, "target")
        self.canary = os.path.join(self.root, "canary")
        with open(self.canary, "w") as f:
            f.write("untouched")

    def outside(self):
        """Everything in the parent directory but the target: what an escape would change."""
        return sorted(set(os.listdir(self.root)) - {"target"})

    def refused(self, *entries):
        with self.assertRaises(UnsafeArchiveError):
            extract(archive(*entries), self.target)
        self.assertEqual(self.outside(), ["canary"])
        with open(self.canary) as f:
            self.assertEqual(f.read(), "untouched")

    def test_an_ordinary_archive_comes_out_whole(self):
        names = extract(archive(("./", "dir", None, 0o755), ("pkg", "dir", None, 0o755),
                                ("pkg/bin.js", "file", b"run()", 0o755), ("node_modules", "dir", None),
                                ("node_modules/.bin", "dir", None), ("node_modules/.bin/tool", "sym", "../../pkg/bin.js"),
                                ("pkg/copy.js", "lnk", "pkg/bin.js", 0o755), ("a b?#%ü.txt", "file", b"odd")), self.target)
        self.assertIn("node_modules/.bin/tool", names)
        with open(os.path.join(self.target, "node_modules/.bin/tool")) as f:
            self.assertEqual(f.read(), "run()")
        with open(os.path.join(self.target, "pkg/copy.js")) as f:
            self.assertEqual(f.read(), "run()")
        with open(os.path.join(self.target, "a b?#%ü.txt"), "rb") as f:
            self.assertEqual(f.read(), b"odd")
        self.assertTrue(os.stat(os.path.join(self.target, "pkg/bin.js")).st_mode & stat.S_IXUSR)
        self.assertEqual(self.outside(), ["canary"])

    def test_absolute_names_and_dotdot_are_refused(self):
        self.refused(("ok", "file", b"x"), (os.path.join(self.root, "evil"), "file", b"x"))
        self.refused(("../evil", "file", b"x"))
        self.refused(("a/../../evil", "file", b"x"))

    def test_a_symlink_pointing_out_is_refused(self):
        self.refused(("out", "sym", ".."))
        self.refused(("out", "sym", self.root))
        self.refused(("d", "dir", None), ("d/out", "sym", "../../canary"))

    def test_nothing_is_written_through_a_symlink(self):
        # A link inside, then a file through it: even to a place inside, refused (and below).
        self.refused(("d", "dir", None), ("l", "sym", "d"), ("l/x", "file", b"x"))
        self.refused(("d", "dir", None), ("l", "sym", "d"), ("l", "file", b"replaces the link"))

    def test_a_symlink_chain_that_leads_out_once_later_entries_exist_is_removed(self):
        # s -> d/x/../.. is inside while d/x does not exist; d/x -> .. (inside: the top) makes s lead out.
        self.refused(("d", "dir", None), ("s", "sym", "d/x/../.."), ("d/x", "sym", ".."))
        self.assertFalse(os.path.lexists(os.path.join(self.target, "s")))
        self.assertTrue(os.path.islink(os.path.join(self.target, "d/x")), "what stays inside stays")

    def test_a_hard_link_to_a_file_outside_is_refused(self):
        self.refused(("h", "lnk", self.canary))
        self.refused(("h", "lnk", "../canary"))
        self.refused(("d", "dir", None), ("l", "sym", "d"), ("d/f", "file", b"x"), ("h", "lnk", "l/f"))

    def test_devices_and_fifos_are_refused(self):
        self.refused(("null", "chr", None))
        self.refused(("pipe", "fifo", None))

    def test_setuid_bits_and_foreign_owners_are_dropped(self):
        extract(archive(("suid", "file", b"#!/bin/sh\n", 0o4755), ("dir", "dir", None, 0o3777)), self.target)
        mode = os.stat(os.path.join(self.target, "suid")).st_mode
        self.assertEqual(stat.S_IMODE(mode), 0o755)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.target, "dir")).st_mode), 0o777)
        self.assertEqual(os.stat(os.path.join(self.target, "suid")).st_uid, os.getuid())
