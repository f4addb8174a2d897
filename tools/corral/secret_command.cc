#include "tools/corral/secret_command.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "tools/corral/client.h"
#include "tools/corral/option_scanner.h"

namespace corral::cli {
namespace {

using nlohmann::json;

constexpr size_t kMaxValueBytes = 8192;

// The value: the whole of `path` or stdin, one trailing newline dropped (what `echo` and an
// editor leave).
StatusOr<std::string> ReadValue(const std::optional<std::string>& path) {
  const int fd = path ? open(path->c_str(), O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
  if (fd < 0) return ErrnoError("--value-file: open " + *path);
  std::string value;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (path) close(fd);
      return ErrnoError(path ? "--value-file: read " + *path : "read stdin");
    }
    if (n == 0) break;
    value.append(buffer, static_cast<size_t>(n));
    if (value.size() > kMaxValueBytes + 2) break;
  }
  if (path) close(fd);
  if (!value.empty() && value.back() == '\n') value.pop_back();
  if (!value.empty() && value.back() == '\r') value.pop_back();
  if (value.empty()) return Status::Error(std::string("the value is empty (") + (path ? *path : "stdin") + ")");
  return value;
}

std::string Path(const SecretOptions& options, const std::string& name = "") {
  std::string path = options.issuer.empty() ? "/v1/secrets" : "/v1/admin/issuers/" + PercentEncode(options.issuer) + "/secrets";
  if (!name.empty()) path += "/" + PercentEncode(name);
  return path;
}

std::string HostsOf(const json& secret) {
  std::string hosts;
  for (const json& binding : secret.value("bindings", json::array())) {
    for (const json& host : binding.value("hosts", json::array())) {
      if (!hosts.empty()) hosts += ",";
      hosts += host.get<std::string>();
    }
  }
  return hosts;
}

}  // namespace

StatusOr<json> SecretPutBody(const std::vector<std::string>& bindings, const std::string& value) {
  json list = json::array();
  for (const std::string& text : bindings) {
    json binding = json::parse(text, nullptr, false);
    if (binding.is_discarded()) return Status::Error("--bind: not JSON: '" + text.substr(0, 80) + "'", EINVAL);
    if (binding.is_array()) {
      for (json& one : binding) list.push_back(std::move(one));
    } else {
      list.push_back(std::move(binding));
    }
  }
  return json{{"value", value}, {"bindings", list}};
}

StatusOr<SecretOptions> ParseSecretOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  constexpr char kSee[] = "corral secret --help";
  SecretOptions out;
  if (args.empty() || IsHelpWord(args[0])) {
    if (args.empty()) return Status::Error("secret: expected put, ls or rm (see corral secret --help)");
    return HelpOnly(out);
  }
  const std::string& verb = args[0];
  if (verb == "put") out.verb = SecretOptions::Verb::kPut;
  else if (verb == "ls" || verb == "list") out.verb = SecretOptions::Verb::kList;
  else if (verb == "rm") out.verb = SecretOptions::Verb::kRemove;
  else return Status::Error("secret: unknown command '" + verb + "' (put, ls, rm)");
  std::vector<OptionSpec> specs = {kUrl, kToken, kAdminSocket, {"--issuer", 0, true}};
  if (out.verb == SecretOptions::Verb::kPut) {
    specs.push_back({"--bind", 0, true});
    specs.push_back({"--value-file", 0, true});
  }
  if (out.verb == SecretOptions::Verb::kList) specs.push_back(kJson);
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 1, specs, std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  const size_t wanted = out.verb == SecretOptions::Verb::kList ? 0 : 1;
  if (scanned.positionals.size() != wanted) {
    return Status::Error("secret " + verb + ": " + (wanted ? "expected one NAME" : "takes no argument"));
  }
  if (wanted) out.name = scanned.positionals[0];
  for (const auto& [option, value] : scanned.options) {
    if (option == "--bind") out.bindings.push_back(value);
  }
  if (out.verb == SecretOptions::Verb::kPut && out.bindings.empty()) {
    return Status::Error("secret put: --bind is required: where the secret may go, e.g. "
                         "--bind '{\"hosts\": [\"github.com\"], \"basic_user\": \"x-access-token\"}'");
  }
  out.value_file = scanned.Value("--value-file");
  out.json = scanned.Has("--json");
  out.issuer = scanned.Value("--issuer").value_or("");
  if (!out.issuer.empty()) {
    RETURN_IF_ERROR(CheckIssuerName(out.issuer, "--issuer"));
    out.admin = ResolveAdmin(scanned, env);
  } else {
    ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  }
  return out;
}

const char* SecretUsage() {
  return "usage: corral secret COMMAND [OPTIONS]\n"
         "\n"
         "Secrets stay with corrald: the egress proxy adds them to a sandbox's requests to the hosts\n"
         "they are bound to, and the sandbox sees only a placeholder (corral sandbox create --secret N).\n"
         "\n"
         "  put NAME --bind JSON [--bind JSON]... [--value-file FILE]\n"
         "                 store (or replace) NAME; its value from FILE, else stdin (never an argument);\n"
         "                 a binding: {\"hosts\": [\"api.github.com\"], \"ports\"?, \"methods\"?, \"path_prefixes\"?,\n"
         "                 \"header\"?: \"Authorization\", \"value\"?: \"Bearer {secret}\"} or {..., \"basic_user\": \"x\"}\n"
         "  ls             NAME OWNER HOSTS (your own, then your issuer's)\n"
         "  rm NAME        delete it\n"
         "\n"
         "  --issuer ISS   an issuer's secrets, for all its users (on the admin socket)\n"
         "  --json         print the daemon's JSON (ls)\n"
         "  --url URL, --token JWT, --admin-socket PATH   as for corral sandbox and corral admin\n";
}

int RunSecretCommand(const SecretOptions& options) {
  const Endpoint endpoint = options.issuer.empty() ? Endpoint::Server(options.server) : Endpoint::Admin(options.admin);
  StatusOr<json> answer = Status::Error("no request");
  if (options.verb == SecretOptions::Verb::kPut) {
    auto value = ReadValue(options.value_file);
    if (!value.ok()) {
      fprintf(stderr, "corral: %s\n", value.status().message().c_str());
      return 2;
    }
    auto body = SecretPutBody(options.bindings, *value);
    std::fill(value->begin(), value->end(), '\0');
    if (!body.ok()) {
      fprintf(stderr, "corral: %s\n", body.status().message().c_str());
      return 2;
    }
    answer = CallJson(endpoint, "PUT", Path(options, options.name), *body);
    if (answer.ok()) printf("%s\n", options.name.c_str());
  } else if (options.verb == SecretOptions::Verb::kRemove) {
    answer = CallJson(endpoint, "DELETE", Path(options, options.name));
  } else {
    answer = CallJson(endpoint, "GET", Path(options));
    if (answer.ok() && options.json) {
      printf("%s\n", answer->dump(2).c_str());
    } else if (answer.ok()) {
      for (const char* list : {"secrets", "issuer_secrets"}) {
        for (const json& secret : answer->value(list, json::array())) {
          printf("%-24s %-7s %s\n", secret.value("name", "").c_str(), secret.value("owner", "").c_str(),
                 HostsOf(secret).c_str());
        }
      }
    }
  }
  if (!answer.ok()) {
    fprintf(stderr, "corral: %s\n", answer.status().message().c_str());
    return 2;
  }
  return 0;
}

}  // namespace corral::cli
