// The two kinds of writable layer (writable_layer.h), and which one a host's new sandboxes get:
// apart from the layers themselves, for `corral doctor` (which links no daemon code).
#pragma once

#include <string>

#include "common/status.h"

namespace corral::supervisor {

// kImage: an ext4 image file on a loop device; kQuotaDir: directories capped by a project quota.
enum class LayerKind { kImage, kQuotaDir };

// [sandbox] disk_quota: how new sandboxes' disk caps are made.
enum class DiskQuotaMode {
  kAuto,     // project quotas where the state dir's file system enforces them, else images
  kProject,  // project quotas, or corrald does not start
  kImage,    // images everywhere
};

// The kind new layers in `sandboxes_dir` get under `mode`, and why (for the log and corral
// doctor). An error for kProject on a file system without enforced project quotas, and when
// `sandboxes_dir` cannot be opened.
struct LayerKindChoice {
  LayerKind kind = LayerKind::kImage;
  std::string why;
};
StatusOr<LayerKindChoice> ChooseLayerKind(DiskQuotaMode mode, const std::string& sandboxes_dir);

}  // namespace corral::supervisor
