#include "tools/corral/remote_options.h"

#include <cstdlib>

#include "common/parse.h"
#include "tools/corral/option_scanner.h"

namespace corral::cli {
namespace {

// `admin token revoke JTI [--issuer NAME]`, `admin token revocations`.
StatusOr<AdminOptions> ParseAdminTokenOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  constexpr char kSee[] = "corral admin --help";
  AdminOptions out;
  if (args.size() < 2) return Status::Error("missing command: token revoke|revocations");
  const std::string& verb = args[1];
  if (verb == "--help" || verb == "-h") return HelpOnly(out);
  std::vector<OptionSpec> specs = {kAdminSocket, kJson};
  if (verb == "revoke") {
    out.verb = AdminVerb::kTokenRevoke;
    specs.push_back({"--issuer", 0, true});
  } else if (verb == "revocations" || verb == "ls") {
    out.verb = AdminVerb::kTokenRevocations;
  } else {
    return Status::Error("unknown command 'admin token " + verb + "' (see " + kSee + ")");
  }
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 2, specs, std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  if (out.verb == AdminVerb::kTokenRevoke) {
    if (scanned.positionals.size() != 1) return Status::Error("admin token revoke: expected one token id (JTI)");
    out.jti = scanned.positionals[0];
    if (out.jti.empty() || out.jti.size() > 256) return Status::Error("JTI: 1 to 256 bytes");
    if (scanned.Has("--issuer")) {
      out.issuer = *scanned.Value("--issuer");
      RETURN_IF_ERROR(CheckIssuerName(out.issuer, "--issuer"));
    }
  } else if (!scanned.positionals.empty()) {
    return Status::Error("admin token " + verb + ": unexpected argument '" + scanned.positionals[0] + "'");
  }
  out.json = scanned.Has("--json");
  out.admin = ResolveAdmin(scanned, env);
  return out;
}

// `admin node ls`, `admin node drain [--move] ID`, `admin node undrain ID`.
StatusOr<AdminOptions> ParseAdminNodeOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  constexpr char kSee[] = "corral admin --help";
  AdminOptions out;
  if (args.size() < 2) return Status::Error("missing command: node ls|drain|undrain");
  const std::string& verb = args[1];
  if (verb == "--help" || verb == "-h") return HelpOnly(out);
  if (verb == "ls" || verb == "list") out.verb = AdminVerb::kNodeList;
  else if (verb == "drain") out.verb = AdminVerb::kNodeDrain;
  else if (verb == "undrain") out.verb = AdminVerb::kNodeUndrain;
  else return Status::Error("unknown command 'admin node " + verb + "' (see " + kSee + ")");
  std::vector<OptionSpec> specs = {kAdminSocket, kJson};
  constexpr OptionSpec kMove{"--move", 0, false};
  if (out.verb == AdminVerb::kNodeDrain) specs.push_back(kMove);
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 2, specs, std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  out.move = scanned.Has("--move");
  if (out.verb == AdminVerb::kNodeList) {
    if (!scanned.positionals.empty()) {
      return Status::Error("admin node ls: unexpected argument '" + scanned.positionals[0] + "'");
    }
  } else {
    if (scanned.positionals.size() != 1) return Status::Error("admin node " + verb + ": expected one node ID");
    out.node = scanned.positionals[0];
    if (out.node.empty() || out.node.size() > 64) return Status::Error("ID: 1 to 64 characters");
  }
  out.json = scanned.Has("--json");
  out.admin = ResolveAdmin(scanned, env);
  return out;
}

}  // namespace

StatusOr<AdminOptions> ParseAdminOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  constexpr char kSee[] = "corral admin --help";
  AdminOptions out;
  if (args.empty()) {
    return Status::Error("missing command: issuer add|rm|ls|rotate, token revoke|revocations, node ls|drain|undrain, "
                         "stop-all");
  }
  if (IsHelpWord(args[0])) return HelpOnly(out);
  if (args[0] == "token") return ParseAdminTokenOptions(args, env);
  if (args[0] == "node") return ParseAdminNodeOptions(args, env);
  if (args[0] == "stop-all") {
    out.verb = AdminVerb::kStopAll;
    ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 1, {kAdminSocket, kJson}, std::nullopt, kSee));
    if (scanned.help) return HelpOnly(out);
    if (!scanned.positionals.empty()) {
      return Status::Error("admin stop-all: unexpected argument '" + scanned.positionals[0] + "'");
    }
    out.json = scanned.Has("--json");
    out.admin = ResolveAdmin(scanned, env);
    return out;
  }
  if (args[0] != "issuer") return Status::Error("unknown command 'admin " + args[0] + "' (see " + kSee + ")");
  if (args.size() < 2) return Status::Error("missing command: issuer add|rm|ls|rotate");
  const std::string& verb = args[1];
  if (verb == "--help" || verb == "-h") return HelpOnly(out);
  if (verb == "add") out.verb = AdminVerb::kIssuerAdd;
  else if (verb == "rm") out.verb = AdminVerb::kIssuerRemove;
  else if (verb == "ls" || verb == "list") out.verb = AdminVerb::kIssuerList;
  else if (verb == "rotate") out.verb = AdminVerb::kIssuerRotate;
  else return Status::Error("unknown command 'admin issuer " + verb + "' (see " + kSee + ")");
  std::vector<OptionSpec> specs = {kAdminSocket};
  if (out.verb != AdminVerb::kIssuerRemove) specs.push_back(kJson);
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 2, specs, std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  const std::string what = "admin issuer " + verb;
  if (out.verb == AdminVerb::kIssuerList) {
    if (!scanned.positionals.empty()) {
      return Status::Error(what + ": unexpected argument '" + scanned.positionals[0] + "'");
    }
  } else {
    if (scanned.positionals.size() != 1) return Status::Error(what + ": expected one issuer NAME");
    out.issuer = scanned.positionals[0];
    RETURN_IF_ERROR(CheckIssuerName(out.issuer, "NAME"));
  }
  out.json = scanned.Has("--json");
  out.admin = ResolveAdmin(scanned, env);
  return out;
}

namespace {

// The words of a list a flag takes, separated by spaces, tabs or commas ("a, b" is a and b).
std::vector<std::string> ListWords(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (char c : text + " ") {
    if (c == ' ' || c == ',' || c == '\t') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word.push_back(c);
    }
  }
  return words;
}

}  // namespace

StatusOr<AdminOptions> ParseTokenOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  constexpr char kSee[] = "corral token --help";
  AdminOptions out;
  out.verb = AdminVerb::kTokenMint;
  if (args.empty()) return Status::Error("missing command: mint");
  if (IsHelpWord(args[0])) return HelpOnly(out);
  if (args[0] != "mint") return Status::Error("unknown command 'token " + args[0] + "' (see " + kSee + ")");
  ASSIGN_OR_RETURN(Scanned scanned,
                   Scan(args, 1,
                        {{"--issuer", 0, true}, {"--user", 0, true}, {"--ttl", 0, true},
                         {"--scope", 0, true}, {"--budget-usd", 0, true}, {"--budget-window", 0, true},
                         {"--images", 0, true}, kAdminSocket, kJson},
                        std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  if (!scanned.positionals.empty()) {
    return Status::Error("token mint: unexpected argument '" + scanned.positionals[0] + "'");
  }
  if (!scanned.Has("--issuer")) return Status::Error("--issuer: required");
  if (!scanned.Has("--user")) return Status::Error("--user: required (the user's id in your system)");
  out.issuer = *scanned.Value("--issuer");
  RETURN_IF_ERROR(CheckIssuerName(out.issuer, "--issuer"));
  out.user = *scanned.Value("--user");
  if (out.user.empty() || out.user.size() > 256) return Status::Error("--user: 1 to 256 bytes");
  if (scanned.Has("--ttl")) {
    auto ttl = ParseDurationSeconds(*scanned.Value("--ttl"));
    if (!ttl.ok()) return ttl.status().WithContext("--ttl");
    if (*ttl == 0) return Status::Error("--ttl: must be at least 1s");
    out.ttl_s = *ttl;
  }
  if (scanned.Has("--scope")) {
    // "exec files", "exec,files" and "exec, files" all mean the same two scopes.
    std::string scope;
    for (const std::string& word : ListWords(*scanned.Value("--scope"))) scope += (scope.empty() ? "" : " ") + word;
    if (scope.empty()) return Status::Error("--scope: empty (omit it for all scopes)");
    out.scope = scope;
  }
  if (scanned.Has("--budget-usd")) {
    const std::string usd = *scanned.Value("--budget-usd");
    char* end = nullptr;
    const double amount = strtod(usd.c_str(), &end);
    if (usd.empty() || end == nullptr || *end != '\0' || !(amount >= 0) || amount > 1e9) {
      return Status::Error("--budget-usd: expected an amount in USD like 5 or 0.25");
    }
    out.budget_usd = usd;
  }
  if (scanned.Has("--budget-window")) {
    const std::string window = *scanned.Value("--budget-window");
    if (window != "hour" && window != "day" && window != "week" && window != "month") {
      return Status::Error("--budget-window: hour, day, week or month");
    }
    if (!out.budget_usd) return Status::Error("--budget-window: only with --budget-usd");
    out.budget_window = window;
  }
  if (scanned.Has("--images")) {
    // "python:*,host", "python:* host": the images the user may create sandboxes of; "": none.
    std::vector<std::string> images = ListWords(*scanned.Value("--images"));
    if (images.size() > 64) return Status::Error("--images: at most 64 entries");
    for (const std::string& image : images) {
      if (image.size() > 255) return Status::Error("--images: an entry is at most 255 characters");
    }
    out.images = std::move(images);
  }
  out.json = scanned.Has("--json");
  out.admin = ResolveAdmin(scanned, env);
  return out;
}

}  // namespace corral::cli
