#include "isolation/net/nftables.h"

#include <nftables/libnftables.h>

#include <cerrno>

namespace corral::isolation::net {

StatusOr<std::string> RunNft(const std::string& commands) {
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return Status::Error("nftables: cannot make a context", ENOMEM);
  nft_ctx_buffer_output(ctx);
  nft_ctx_buffer_error(ctx);
  const int rc = nft_run_cmd_from_buffer(ctx, commands.c_str());
  // Each get empties its buffer: one call each.
  const char* printed = nft_ctx_get_output_buffer(ctx);
  const char* complaint = nft_ctx_get_error_buffer(ctx);
  std::string output = printed ? printed : "";
  std::string error = complaint ? complaint : "";
  nft_ctx_free(ctx);
  if (rc != 0) {
    while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
    return Status::Error("nftables: " + (error.empty() ? std::string("failed") : error), EIO);
  }
  return output;
}

// nft lists the tables one per line: "table inet corral_sb_...".
StatusOr<std::set<std::string>> ListTables(std::string_view family, std::string_view prefix) {
  ASSIGN_OR_RETURN(std::string text, RunNft("list tables " + std::string(family)));
  std::set<std::string> names;
  const std::string start = "table " + std::string(family) + " " + std::string(prefix);
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    if (line.size() > start.size() && line.substr(0, start.size()) == start) {
      names.insert(std::string(line.substr(start.size())));
    }
    at = end + 1;
  }
  return names;
}

Status ReplaceTable(std::string_view family, std::string_view name, const std::string& ruleset) {
  // "add" makes the table when it is missing, so that "delete" never fails.
  const std::string table = std::string(family) + " " + std::string(name);
  return RunNft("add table " + table + "\ndelete table " + table + "\n" + ruleset).status();
}

Status DeleteTable(std::string_view family, std::string_view name) {
  return RunNft("delete table " + std::string(family) + " " + std::string(name)).status();
}

}  // namespace corral::isolation::net
