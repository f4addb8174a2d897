// A stopped sandbox's writable layer as one file, to move it to another node of the fleet (a
// drain that moves: api/sandbox_mover.h), and back into a layer there.
//
// The file is a tar written and read by GNU tar (Debian's), which keeps what a layer holds:
// owners by number, modes with setuid/setgid, every extended attribute (the overlay's
// trusted.overlay.* markers, file capabilities) and ACLs, hard links, device nodes (the overlay's
// whiteouts), and holes (an ext4 image of the disk cap is mostly holes: --sparse stores only
// its data). One member:
//   kImage      the image file, by its name (a sandbox's disk.img, a snapshot's <id>.img: the
//               same on both nodes)
//   kQuotaDir   upper/ (the overlay's upper directory; work/ is the overlay's scratch, made anew)
// A layer that does not exist (a sandbox that never ran) packs as an empty tar and unpacks as
// nothing: its start makes it, as for a new sandbox.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "supervisor/sandboxes/writable_layer.h"

namespace corral::supervisor {

struct PackedLayer {
  uint64_t bytes = 0;   // the tar's size
  std::string sha256;   // hex, of the whole tar
};

// Writes the tar of `layer` (not in use) at `tar_path` (replaced), synced, and hashes it.
StatusOr<PackedLayer> PackLayer(const WritableLayer& layer, const std::string& tar_path);

// Unpacks a tar PackLayer wrote into `layer`, whose kind the tar must be of: kImage: the image
// file is made (replaced); kQuotaDir: `layer.path` must exist (MakeLayer: what is unpacked is
// charged to its project), upper/ is filled from the tar and an empty work/ made beside it.
// Only the kind's one member is taken from the tar (anything else in it is an error), synced.
Status UnpackLayer(const std::string& tar_path, const WritableLayer& layer);

}  // namespace corral::supervisor
