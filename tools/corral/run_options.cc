#include "tools/corral/run_options.h"

#include <functional>
#include <map>

#include "common/parse.h"

namespace corral::cli {
namespace {

using isolation::SandboxSpecBuilder;
using Setter = std::function<Status(SandboxSpecBuilder&, const std::string&)>;

template <typename Parser, typename Apply>
Setter Numeric(Parser parse, Apply apply) {
  return [parse, apply](SandboxSpecBuilder& builder, const std::string& value) -> Status {
    auto parsed = parse(value);
    if (!parsed.ok()) return parsed.status();
    apply(builder, *parsed);
    return Status();
  };
}

const std::map<std::string, Setter>& Setters() {
  static const std::map<std::string, Setter> setters = {
      {"--memory", Numeric(ParseSize, [](auto& b, uint64_t v) { b.SetMemoryLimit(v); })},
      {"--cpus", Numeric([](const std::string& v) { return ParseFixedPoint(v, 1000); },
                         [](auto& b, uint64_t v) { b.SetCpuLimit(v); })},
      {"--pids", Numeric(ParseUint, [](auto& b, uint64_t v) { b.SetPidsLimit(v); })},
      {"--wall-time", Numeric(ParseSecondsToMicros, [](auto& b, uint64_t v) { b.SetWallTimeLimit(v); })},
      {"--cpu-time", Numeric(ParseSecondsToMicros, [](auto& b, uint64_t v) { b.SetCpuTimeLimit(v); })},
      {"--disk", Numeric(ParseSize, [](auto& b, uint64_t v) { b.SetDiskLimit(v); })},
      {"--nofile", Numeric(ParseUint, [](auto& b, uint64_t v) { b.SetNofileLimit(v); })},
      {"--image", [](auto& b, const std::string& v) { b.SetImage(v); return Status(); }},
      {"--layer", [](auto& b, const std::string& v) { b.AddImageLayer(v); return Status(); }},
      {"--workspace", [](auto& b, const std::string& v) { b.SetWorkspace(v); return Status(); }},
      {"--bind", [](auto& b, const std::string& v) { b.AddBind(v); return Status(); }},
      {"--env", [](auto& b, const std::string& v) { b.AddEnv(v); return Status(); }},
      {"--cwd", [](auto& b, const std::string& v) { b.SetCwd(v); return Status(); }},
      {"--hostname", [](auto& b, const std::string& v) { b.SetHostname(v); return Status(); }},
      {"--user", [](auto& b, const std::string& v) { b.SetUser(v); return Status(); }},
  };
  return setters;
}

// The builder's field names are the options' names without "--"; "cpu-time: ..." is already
// an option name, "memory: ..." becomes "--memory: ...".
Status Prefixed(const Status& status) {
  const std::string& message = status.message();
  for (const auto& [option, setter] : Setters()) {
    std::string field = option.substr(2) + ":";
    if (message.rfind(field, 0) == 0) return Status::Error("--" + message, status.error_number());
  }
  return status;
}

}  // namespace

const char* RunUsage() {
  return "usage: corral run [OPTIONS] -- CMD [ARGS...]\n"
         "\n"
         "Runs CMD in a fresh sandbox and exits with its exit code (128+N for signal N,\n"
         "125 when the sandbox could not be set up).\n"
         "\n"
         "  --memory SIZE        memory limit (K/M/G suffixes), swap off\n"
         "  --cpus N             CPU quota in cores (fractions allowed)\n"
         "  --pids N             process/thread limit\n"
         "  --wall-time S        wall-clock limit in seconds\n"
         "  --cpu-time S         CPU-time limit in seconds (whole sandbox, kernel accounting)\n"
         "  --disk SIZE          cap on what the sandbox can write\n"
         "  --nofile N           open-file limit\n"
         "  --image host|PATH    root file system (default: host)\n"
         "  --layer DIR          an image of layer directories instead, top first\n"
         "                       (repeatable; ids on disk are shown shifted into the\n"
         "                       sandbox's range, so root-owned files are root's inside)\n"
         "  --workspace DIR      persistent writable layer\n"
         "  --bind SRC:DST[:ro]  extra bind mount\n"
         "  --env K=V            environment variable (repeatable)\n"
         "  --cwd DIR            working directory inside\n"
         "  --hostname NAME      host name inside (default: corral)\n"
         "  --user root|agent    user inside (default: agent, uid 1000)\n"
         "  --outcome-json FILE  write the outcome as JSON ('-' for stderr)\n";
}

StatusOr<RunOptions> ParseRunOptions(const std::vector<std::string>& args) {
  SandboxSpecBuilder builder;
  std::optional<std::string> outcome_json;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;  // The command starts here.
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const bool known = arg == "--outcome-json" || Setters().count(arg) > 0;
    if (!known) return Status::Error("unknown option '" + arg + "' (see corral run --help)");
    if (!has_value) {
      if (i + 1 >= args.size()) return Status::Error(arg + ": missing value");
      value = args[++i];
    }
    if (arg == "--outcome-json") {
      if (value.empty()) return Status::Error("--outcome-json: missing file name");
      outcome_json = value;
      continue;
    }
    Status status = Setters().at(arg)(builder, value);
    if (!status.ok()) return Status::Error(arg + ": " + status.message());
  }
  builder.SetCommand(std::vector<std::string>(args.begin() + static_cast<long>(i), args.end()));
  auto spec = builder.Build();
  if (!spec.ok()) return Prefixed(spec.status());
  return RunOptions{std::move(spec).value(), outcome_json};
}

}  // namespace corral::cli
