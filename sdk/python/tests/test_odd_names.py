"""Names that break naive URL building, against the real corrald: file paths with `?`, `#`, `%`,
`&`, `=`, `+`, spaces and non-ASCII go through every file API (write, read, stat, list, rename,
mkdir, tar both ways, remove) as themselves, never as a query or a fragment (a decoy file named
like the truncated path proves which file was touched); and a user id with odd characters (quotes,
a slash, `..`, spaces, an emoji) is a user of its own whose token corrald takes."""
import os
import tempfile

import corral
from helpers import DaemonTest

ODD = ["a b", "q?x=1", "h#frag", "p%41ct", "amp&eq=1", "plus+sign", "ünï cødé 用户", "semi;colon", "quote'\"s"]


class OddNames(DaemonTest):
    async def test_paths_with_query_and_fragment_characters_are_files_not_urls(self):
        c = self.client("py-odd-paths")
        box = await self.sandbox(c, name="odd")
        base = "/home/agent/odd dir?#%"
        await c.mkdir(box.id, base)
        # Decoys: what a path cut at ? or #, or decoded once more (%41 -> A, + -> space), would name.
        await c.mkdir(box.id, "/home/agent/odd dir")
        for decoy in ("q", "h", "pAct", "plus sign", "amp"):
            await c.write_file(box.id, f"{base}/{decoy}", b"decoy")
        for name in ODD:
            path = f"{base}/{name}"
            await c.write_file(box.id, path, name.encode())
            self.assertEqual(await c.read_text(box.id, path), name)
            self.assertEqual((await c.stat(box.id, path)).size, len(name.encode()))
        listed = {e.name for e in await c.list_dir(box.id, base)}
        self.assertTrue(set(ODD) <= listed, listed)
        self.assertEqual(await c.list_dir(box.id, "/home/agent/odd dir"), [], "the path cut at ? is untouched")
        for decoy in ("q", "h", "pAct", "plus sign", "amp"):
            self.assertEqual(await c.read_text(box.id, f"{base}/{decoy}"), "decoy", decoy)

        await c.rename(box.id, f"{base}/q?x=1", f"{base}/renamed #2?")
        self.assertEqual(await c.read_text(box.id, f"{base}/renamed #2?"), "q?x=1")
        with tempfile.TemporaryDirectory() as local:
            names = await c.download_dir(box.id, base, local)
            self.assertIn("ünï cødé 用户", [os.path.basename(n.rstrip("/")) for n in names])
            with open(os.path.join(local, "h#frag"), "rb") as f:
                self.assertEqual(f.read(), b"h#frag")
            await c.mkdir(box.id, "/home/agent/up ?#")
            self.assertEqual(await c.upload_dir(box.id, local, "/home/agent/up ?#"), len(os.listdir(local)))
        self.assertEqual(await c.read_text(box.id, "/home/agent/up ?#/p%41ct"), "p%41ct")
        await c.remove(box.id, base, recursive=True)
        with self.assertRaises(corral.CorralError) as gone:
            await c.stat(box.id, f"{base}/a b")
        self.assertEqual(gone.exception.code, "not_found")
        self.assertEqual(await c.read_text(box.id, "/home/agent/up ?#/a b"), "a b", "the control stays")

    async def test_a_user_id_with_odd_characters_is_a_user_of_its_own(self):
        odd = self.client('py "odd"/../ user 😀')
        plain = self.client("py-odd-plain")
        box = await self.sandbox(odd, name="mine")
        self.assertEqual([s.id for s in await odd.list_sandboxes()], [box.id])
        self.assertEqual(await plain.list_sandboxes(), [])
        with self.assertRaises(corral.CorralError) as other:
            await plain.get_sandbox(box.id)
        self.assertEqual(other.exception.code, "not_found")
