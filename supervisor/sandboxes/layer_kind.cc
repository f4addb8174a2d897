#include "supervisor/sandboxes/layer_kind.h"

#include "rootfs/project_quota.h"

namespace corral::supervisor {

StatusOr<LayerKindChoice> ChooseLayerKind(DiskQuotaMode mode, const std::string& sandboxes_dir) {
  if (mode == DiskQuotaMode::kImage) return LayerKindChoice{LayerKind::kImage, "disk_quota = \"image\""};
  ASSIGN_OR_RETURN(rootfs::ProjectQuotaSupport support, rootfs::ProbeProjectQuota(sandboxes_dir));
  if (support.enforced) {
    return LayerKindChoice{LayerKind::kQuotaDir, support.fs_type + " enforces project quotas at " + sandboxes_dir};
  }
  if (mode == DiskQuotaMode::kProject) {
    return Status::Error("sandbox.disk_quota = \"project\", but " + sandboxes_dir + " is on " + support.reason,
                         EOPNOTSUPP);
  }
  return LayerKindChoice{LayerKind::kImage, sandboxes_dir + " is on " + support.reason};
}

}  // namespace corral::supervisor
