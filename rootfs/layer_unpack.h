// Unpacking one image layer (a tar, plain, gzip or zstd) into a directory that overlayfs can
// stack as a lower layer, verified against its digests, all or nothing.
//
// The blob is read once for its digest (compared before anything is parsed), then once through
// libarchive: the decompression filter is chosen by the content (gzip and zstd magic, else
// plain; the media type is never trusted; no other filters, and never one that runs an external
// program), and the uncompressed stream feeds both the diff_id hash and the tar reader, so a
// gzip bomb is refused as soon as the stream passes `max_bytes`, without writing it all.
//
// Entries are written by corral, not by archive_write_disk, with *at calls under a directory fd:
//  - paths are normalized lexically (archive_paths.h): absolute paths, `..`, NUL, over-long paths
//    are refused; parents are opened with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, so an entry
//    never writes through a symlink an earlier entry planted (`a -> /etc`, then `a/passwd`);
//    missing parents are made 0755 root:root;
//  - a later entry replaces an earlier one at the same path (a non-directory or a directory tree
//    is removed first; a directory over a directory keeps its content and takes the new
//    owner/mode);
//  - regular files O_CREAT | O_EXCL | O_NOFOLLOW (sparse holes kept); directories; symlinks
//    (absolute targets kept as they are: they resolve inside the sandbox's root at run time; a
//    relative target that climbs above the layer's root from the link's own directory is
//    refused); hard links only to a regular file this layer already extracted (refused otherwise);
//    FIFOs. Character and block devices are refused ("device node"), sockets too;
//  - OCI whiteouts become overlayfs whiteouts: `dir/.wh.NAME` -> a character device 0:0 at
//    `dir/NAME` (unless this layer itself has `dir/NAME`: a whiteout applies to lower layers
//    only); `dir/.wh..wh..opq` -> xattr trusted.overlay.opaque="y" on `dir`. Other `.wh..wh.*`
//    names (aufs's hard link bookkeeping) are skipped;
//  - ownership: the tar's uid and gid as stored, NOT shifted (layers are mounted idmapped); ids
//    >= 65536 are refused. Mode: the tar's mode & 07777, set after the chown (which clears
//    setuid). Modification times of files, symlinks and FIFOs, and of directories in a last pass
//    (after their content was written); directories made only as parents keep the time of the
//    unpacking. No extended attributes, ACLs or file capabilities from the tar are applied:
//    a capability in an image grants nothing.
//  - the layer's own root entry ("./") is counted but not applied: the top-level directory is
//    made 0755 and owned by the caller (root).
//
// The unpacking happens in `dest` + ".partial-<random>" beside `dest`, renamed to `dest`
// (renameat2 RENAME_NOREPLACE) only when every entry was written and both digests match; the
// file system is synced (syncfs) before the rename, so a `dest` that exists is whole. On any
// error the partial tree is removed (no symlink followed) and nothing is left.
//
// The CALLER keeps the directory that holds `dest` mode 0700: a layer may hold setuid-root
// files, which must not be reachable by host users.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace corral::rootfs {

struct LayerCheck {
  // "sha256:<hex>" of the blob file as stored (compressed); empty: not checked (still computed).
  std::string blob_digest;
  // "sha256:<hex>" of the uncompressed tar stream; empty: not checked (still computed).
  std::string diff_id;
};

struct UnpackLimits {
  // Cap on the uncompressed stream (headers included) and on the sum of regular file sizes;
  // the stream, which holds the files, is in practice the one that binds.
  uint64_t max_bytes = uint64_t{16} << 30;
  // Cap on the number of tar entries (whiteouts and directories included).
  uint64_t max_entries = 1'000'000;
};

struct UnpackedLayer {
  std::string diff_id;      // "sha256:<hex>" of the uncompressed stream
  std::string blob_digest;  // "sha256:<hex>" of the blob file
  uint64_t unpacked_bytes = 0;  // sum of the regular files' sizes
  uint64_t entries = 0;         // tar entries read
};

// The largest uid or gid a layer may hold (the sandbox maps 65536 ids).
inline constexpr uint32_t kMaxLayerId = 65535;

// Unpacks the layer blob at `blob_path` into `dest` (which must not exist; its parent must) as
// described above. Errors name the layer and the entry: "layer sha256:ab..: entry ../x: path
// leaves the layer".
StatusOr<UnpackedLayer> UnpackLayer(const std::string& blob_path, const std::string& dest,
                                    const LayerCheck& check, const UnpackLimits& limits);

}  // namespace corral::rootfs
