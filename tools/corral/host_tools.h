// The host tools of `corral prompt --allow-host-tools`: tools that the session declares to its
// agent (as client tools) and that `corral` runs on the user's own machine, in the directory it
// was started in, when the agent calls them.
//
//   HostBash  {command, timeout_s?}                    /bin/sh -c in the directory; exit code and
//                                                      output (stdout and stderr together)
//   HostRead  {path, offset?, limit?}                  a file's lines (1-based offset)
//   HostWrite {path, content}                          creates or replaces a file
//   HostEdit  {path, old_string, new_string, replace_all?}  replaces text that must occur once
//                                                      (or every occurrence with replace_all)
//   HostGlob  {pattern}                                paths matching a glob(7) pattern
//   HostGrep  {pattern, path?, glob?}                  lines matching an extended regex, in the
//                                                      files under path (default: everything)
//
// File tools resolve paths against the directory and refuse any that leads outside it (after
// following symlinks): the agent works on this project, not on the user's home. HostBash is a
// shell and can do anything the user can: that is what the consent question is for.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace corral::cli {

// [{"name", "description", "input_schema"}, ...] for a session's "tools".
nlohmann::json HostToolDeclarations();
bool IsHostTool(const std::string& name);

struct HostToolResult {
  std::string text;
  bool is_error = false;
};

// Runs one call in `root` (an absolute, real directory). Never throws.
HostToolResult RunHostTool(const std::string& name, const nlohmann::json& input, const std::string& root);

// One line for the consent question: "HostBash: make test".
std::string DescribeHostCall(const std::string& name, const nlohmann::json& input);

}  // namespace corral::cli
