// The store's images: layers, images as stacks of layers, and the tags that name them.
#include <cerrno>
#include <ctime>
#include <mutex>

#include "supervisor/store/store.h"
#include "supervisor/store/store_rows.h"
#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

namespace {

// Fills an image's layers and names from their tables.
Status FillImage(SqlDb* db, ImageRow& image) {
  ASSIGN_OR_RETURN(image.layers,
                   Query<std::string>(db, "SELECT diff_id FROM image_layers WHERE image = ?1 ORDER BY position",
                                      {image.digest}, "list the layers of image " + image.digest));
  ASSIGN_OR_RETURN(image.layer_bytes,
                   Query<int64_t>(db,
                                  "SELECT l.bytes FROM image_layers il JOIN layers l ON l.diff_id = il.diff_id "
                                  "WHERE il.image = ?1 ORDER BY il.position",
                                  {image.digest}, "list the layer sizes of image " + image.digest));
  ASSIGN_OR_RETURN(image.names, Query<std::string>(db, "SELECT name FROM image_tags WHERE image = ?1 ORDER BY name",
                                                   {image.digest}, "list the names of image " + image.digest));
  return Status();
}

Status Tag(SqlDb* db, const std::string& name, const std::string& digest, bool force) {
  ASSIGN_OR_RETURN(std::optional<std::string> current,
                   QueryOne<std::string>(db, "SELECT image FROM image_tags WHERE name = ?1", {name}, "read tag " + name));
  if (current && *current == digest) return Status();
  if (current && !force) {
    return Status::Error("image name " + name + " already names " + *current + " (force to move it)", EEXIST);
  }
  return Run(db, "INSERT INTO image_tags (name, image, updated_at) VALUES (?1, ?2, ?3) "
                 "ON CONFLICT (name) DO UPDATE SET image = excluded.image, updated_at = excluded.updated_at",
             {name, digest, static_cast<int64_t>(time(nullptr))}, "tag " + digest + " as " + name);
}

StatusOr<ImageUse> Uses(SqlDb* db, const std::string& digest) {
  ImageUse use;
  ASSIGN_OR_RETURN(std::optional<int64_t> sandboxes,
                   QueryInt(db, "SELECT count(*) FROM sandboxes WHERE image = ?1", {digest}, "count sandboxes of image"));
  ASSIGN_OR_RETURN(std::optional<int64_t> snapshots,
                   QueryInt(db, "SELECT count(*) FROM snapshots WHERE image = ?1", {digest}, "count snapshots of image"));
  use.sandboxes = sandboxes.value_or(0);
  use.snapshots = snapshots.value_or(0);
  ASSIGN_OR_RETURN(std::optional<std::string> example,
                   QueryOne<std::string>(db, "SELECT id FROM sandboxes WHERE image = ?1 UNION ALL "
                                             "SELECT id FROM snapshots WHERE image = ?1 LIMIT 1",
                                         {digest}, "find a user of image"));
  use.example = example.value_or("");
  return use;
}

}  // namespace

Status Store::InsertImage(const ImageRow& image, const std::vector<LayerRow>& layers, const std::string& name,
                          bool force) {
  return InTransaction([&]() -> Status {
    for (const LayerRow& layer : layers) {
      RETURN_IF_ERROR(Run(db_, Sql({"INSERT INTO layers (", kLayerColumns, ") VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING"}),
                          Values(layer), "insert layer " + layer.diff_id));
    }
    ASSIGN_OR_RETURN(std::optional<int64_t> known,
                     QueryInt(db_, "SELECT count(*) FROM images WHERE digest = ?1", {image.digest}, "find image"));
    if (known.value_or(0) == 0) {
      RETURN_IF_ERROR(Run(db_, InsertSql("images", kImageColumns), Values(image), "insert image " + image.digest));
      for (size_t i = 0; i < image.layers.size(); ++i) {
        RETURN_IF_ERROR(Run(db_, "INSERT INTO image_layers (image, position, diff_id) VALUES (?1, ?2, ?3)",
                            {image.digest, static_cast<int64_t>(i), image.layers[i]},
                            "insert layer " + std::to_string(i) + " of image " + image.digest));
      }
    }
    if (!name.empty()) RETURN_IF_ERROR(Tag(db_, name, image.digest, force));
    return Status();
  });
}

StatusOr<std::optional<ImageRow>> Store::GetImage(const std::string& digest) {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::optional<ImageRow> image,
                   QueryOne<ImageRow>(db_, GetSql("images", kImageColumns), {digest}, "get image " + digest));
  if (image) RETURN_IF_ERROR(FillImage(db_, *image));
  return image;
}

StatusOr<std::vector<ImageRow>> Store::ListImages() {
  std::lock_guard lock(mu_);
  ASSIGN_OR_RETURN(std::vector<ImageRow> images,
                   Query<ImageRow>(db_, Sql({"SELECT ", kImageColumns, " FROM images ORDER BY created_at, digest"}), {},
                                   "list images"));
  for (ImageRow& image : images) RETURN_IF_ERROR(FillImage(db_, image));
  return images;
}

StatusOr<std::optional<std::string>> Store::ImageOfTag(const std::string& name) {
  std::lock_guard lock(mu_);
  return QueryOne<std::string>(db_, "SELECT image FROM image_tags WHERE name = ?1", {name}, "read tag " + name);
}

Status Store::SetImageTag(const std::string& name, const std::string& digest, bool force) {
  return InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(std::optional<int64_t> known,
                     QueryInt(db_, "SELECT count(*) FROM images WHERE digest = ?1", {digest}, "find image"));
    if (known.value_or(0) == 0) return NotFound("image " + digest);
    return Tag(db_, name, digest, force);
  });
}

Status Store::DeleteImage(const std::string& digest) {
  return InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(ImageUse use, Uses(db_, digest));
    if (use.sandboxes + use.snapshots > 0) {
      return Status::Error("image " + digest + " is used by " + std::to_string(use.sandboxes) + " sandbox(es) and " +
                               std::to_string(use.snapshots) + " snapshot(s), e.g. " + use.example,
                           EBUSY);
    }
    return RunOnExistingRow(db_, "DELETE FROM images WHERE digest = ?1", {digest}, "delete image " + digest);
  });
}

StatusOr<ImageUse> Store::ImageUses(const std::string& digest) {
  std::lock_guard lock(mu_);
  return Uses(db_, digest);
}

StatusOr<std::vector<LayerRow>> Store::ListLayers() {
  std::lock_guard lock(mu_);
  return Query<LayerRow>(db_, Sql({"SELECT ", kLayerColumns, " FROM layers ORDER BY diff_id"}), {}, "list layers");
}

StatusOr<std::vector<LayerRow>> Store::DeleteUnusedLayers() {
  std::vector<LayerRow> unused;
  Status done = InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(unused, Query<LayerRow>(db_,
                                             Sql({"SELECT ", kLayerColumns, " FROM layers WHERE diff_id NOT IN "
                                                  "(SELECT diff_id FROM image_layers) ORDER BY diff_id"}),
                                             {}, "list unused layers"));
    return Run(db_, "DELETE FROM layers WHERE diff_id NOT IN (SELECT diff_id FROM image_layers)", {},
               "delete unused layers");
  });
  if (!done.ok()) return done;
  return unused;
}

}  // namespace corral::supervisor
