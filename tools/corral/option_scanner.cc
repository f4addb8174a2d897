#include "tools/corral/option_scanner.h"

namespace corral::cli {

bool LooksLikeOption(const std::string& arg) { return arg.size() > 1 && arg[0] == '-'; }

StatusOr<Scanned> Scan(const std::vector<std::string>& args, size_t begin,
                       const std::vector<OptionSpec>& specs,
                       std::optional<size_t> positionals_before_command, std::string_view see) {
  Scanned out;
  auto find_long = [&](std::string_view name) -> const OptionSpec* {
    for (const auto& spec : specs) {
      if (spec.name == name) return &spec;
    }
    return nullptr;
  };
  auto find_short = [&](char c) -> const OptionSpec* {
    for (const auto& spec : specs) {
      if (spec.short_name == c) return &spec;
    }
    return nullptr;
  };
  auto unknown = [&](const std::string& option) {
    return Status::Error("unknown option '" + option + "' (see " + std::string(see) + ")");
  };
  for (size_t i = begin; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      auto& rest = positionals_before_command ? out.command : out.positionals;
      rest.insert(rest.end(), args.begin() + static_cast<long>(i + 1), args.end());
      break;
    }
    if (positionals_before_command && out.positionals.size() >= *positionals_before_command &&
        !LooksLikeOption(arg)) {
      out.command.assign(args.begin() + static_cast<long>(i), args.end());
      break;
    }
    if (arg == "--help" || arg == "-h") {
      out.help = true;
      return out;
    }
    if (arg.rfind("--", 0) == 0) {
      std::string name = arg;
      std::optional<std::string> value;
      if (size_t eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
      }
      const OptionSpec* spec = find_long(name);
      if (spec == nullptr) return unknown(name);
      if (!spec->takes_value) {
        if (value) return Status::Error(name + ": takes no value");
        out.options.emplace_back(name, "");
        continue;
      }
      if (!value) {
        if (i + 1 >= args.size()) return Status::Error(name + ": missing value");
        value = args[++i];
      }
      out.options.emplace_back(name, *value);
      continue;
    }
    if (LooksLikeOption(arg)) {
      // A group of boolean short options: -it.
      for (size_t k = 1; k < arg.size(); ++k) {
        const OptionSpec* spec = find_short(arg[k]);
        if (spec == nullptr || spec->takes_value) return unknown(std::string("-") + arg[k]);
        out.options.emplace_back(std::string(spec->name), "");
      }
      continue;
    }
    out.positionals.push_back(arg);
  }
  return out;
}

std::vector<OptionSpec> With(std::vector<OptionSpec> specs, std::initializer_list<OptionSpec> more) {
  specs.insert(specs.end(), more.begin(), more.end());
  return specs;
}

StatusOr<ServerConfig> ResolveServer(const Scanned& scanned, const EnvLookup& env) {
  ServerConfig config;
  std::string source = "--url";
  std::optional<std::string> url = scanned.Value("--url");
  if (!url) {
    url = env("CORRAL_URL");
    source = "CORRAL_URL";
  }
  auto parsed = ParseServerUrl(url.value_or(kDefaultServerUrl));
  if (!parsed.ok()) return parsed.status().WithContext(source);
  config.url = std::move(parsed).value();

  std::optional<std::string> token = scanned.Value("--token");
  if (token && token->empty()) return Status::Error("--token: empty");
  if (!token) token = env("CORRAL_TOKEN");
  if (!token) {
    return Status::Error(
        "no token: pass --token JWT or set CORRAL_TOKEN (your operator's backend mints one; on "
        "the corrald host, root can run: corral token mint --issuer NAME --user ID)");
  }
  config.token = *token;
  return config;
}

AdminConfig ResolveAdmin(const Scanned& scanned, const EnvLookup& env) {
  std::optional<std::string> path = scanned.Value("--admin-socket");
  if (!path || path->empty()) path = env("CORRAL_ADMIN_SOCKET");
  return AdminConfig{path.value_or(kDefaultAdminSocket)};
}


Status CheckUser(const std::optional<std::string>& user) {
  if (user && *user != "agent" && *user != "root") {
    return Status::Error("--user: expected agent or root, not '" + *user + "'");
  }
  return Status();
}

Status CheckIssuerName(const std::string& name, std::string_view what) {
  bool valid = !name.empty() && name.size() <= 64;
  for (char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                         c == '.' || c == '_' || c == '-';
    valid = valid && allowed;
  }
  if (valid) return Status();
  return Status::Error(std::string(what) + ": '" + name +
                       "' is not an issuer name (1-64 characters of A-Z a-z 0-9 . _ -)");
}


}  // namespace corral::cli
