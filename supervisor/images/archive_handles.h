// Owners of the libarchive writers, archive entries and fts walks that image builds make tars
// with (context_tar.cc, layer_capture.cc).
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <fts.h>

#include <memory>

namespace corral::supervisor {

struct ArchiveWriteFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct ArchiveEntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
struct FtsClose {
  void operator()(FTS* f) const { fts_close(f); }
};
using ArchiveWriter = std::unique_ptr<struct archive, ArchiveWriteFree>;
using ArchiveEntryPtr = std::unique_ptr<archive_entry, ArchiveEntryFree>;
using FtsWalk = std::unique_ptr<FTS, FtsClose>;

}  // namespace corral::supervisor
