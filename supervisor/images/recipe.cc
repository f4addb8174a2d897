// The recipe parser: logical lines, words with quotes and variables, one function an instruction.
#include "supervisor/images/recipe.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <set>

#include <nlohmann/json.hpp>

#include "rootfs/scoped_path.h"


namespace corral::supervisor {
namespace {

using Vars = std::map<std::string, std::string>;

struct Line {
  int number = 0;
  std::string text;
};

Status LineError(int line, const std::string& what) {
  return Status::Error("recipe line " + std::to_string(line) + ": " + what, EINVAL);
}

std::string Trim(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end && isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return std::string(s.substr(begin, end - begin));
}

// Physical lines joined at trailing backslashes; comments and blank lines dropped.
StatusOr<std::vector<Line>> LogicalLines(std::string_view text) {
  std::vector<Line> lines;
  std::string pending;
  int start = 0, number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    if (raw.find('\0') != std::string_view::npos) return LineError(number, "a NUL character");
    const std::string trimmed = Trim(raw);
    if (trimmed.empty() || trimmed[0] == '#') continue;  // also inside a continuation, as Docker
    if (pending.empty()) start = number;
    std::string part = Trim(raw);
    const bool continues = part.back() == '\\';
    if (continues) part.pop_back();
    pending += (pending.empty() ? "" : " ") + part;
    if (!continues) {
      lines.push_back({start, Trim(pending)});
      pending.clear();
    }
  }
  if (!Trim(pending).empty()) lines.push_back({start, Trim(pending)});
  return lines;
}

bool IsVarName(std::string_view name) {
  if (name.empty() || !(isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// A `$NAME`, `${NAME}` or `${NAME:-default}` at text[pos] (text[pos] == '$'); advances pos.
StatusOr<std::string> Variable(std::string_view text, size_t& pos, const Vars& vars, int line) {
  ++pos;
  std::string name, fallback;
  bool has_fallback = false;
  if (pos < text.size() && text[pos] == '{') {
    const size_t close = text.find('}', pos);
    if (close == std::string_view::npos) return LineError(line, "unterminated ${ in " + std::string(text));
    std::string inner(text.substr(pos + 1, close - pos - 1));
    pos = close + 1;
    if (size_t sep = inner.find(":-"); sep != std::string::npos) {
      fallback = inner.substr(sep + 2);
      has_fallback = true;
      inner.resize(sep);
    }
    if (!IsVarName(inner)) return LineError(line, "bad variable name ${" + inner + "}");
    name = inner;
  } else {
    while (pos < text.size() && (isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_')) name += text[pos++];
    if (!IsVarName(name)) return std::string(name.empty() ? "$" : "$" + name);  // not a variable
  }
  auto it = vars.find(name);
  if (it != vars.end() && !(has_fallback && it->second.empty())) return it->second;
  return has_fallback ? fallback : std::string();
}

// Splits `text` into words at blanks outside quotes; '...' is literal, "..." and bare text take
// variables (when `vars` is given) and backslash escapes.
StatusOr<std::vector<std::string>> Words(std::string_view text, const Vars* vars, int line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t pos = 0; pos < text.size();) {
    const char c = text[pos];
    if (quote == '\'') {
      if (c == '\'') quote = 0; else word += c;
      ++pos;
    } else if (c == '\\' && pos + 1 < text.size()) {
      word += text[pos + 1];
      pos += 2;
      in_word = true;
    } else if (c == '$' && vars != nullptr) {
      ASSIGN_OR_RETURN(std::string value, Variable(text, pos, *vars, line));
      word += value;
      in_word = true;
    } else if (quote == '"') {
      if (c == '"') quote = 0; else word += c;
      ++pos;
    } else if (c == '"' || c == '\'') {
      quote = c;
      in_word = true;
      ++pos;
    } else if (isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
      ++pos;
    } else {
      word += c;
      in_word = true;
      ++pos;
    }
  }
  if (quote != 0) return LineError(line, std::string("unterminated ") + quote + " quote");
  if (in_word) words.push_back(word);
  return words;
}

// A path's components with "." and ".." applied lexically; a ".." above the top stays there when
// `clamp` (an absolute path: "/.." is "/"), else it is nullopt (it leaves).
std::optional<std::vector<std::string>> Lexical(std::string_view path, bool clamp) {
  std::vector<std::string> parts;
  for (std::string& part : rootfs::PathComponents(path)) {
    if (part != "..") {
      parts.push_back(std::move(part));
    } else if (!parts.empty()) {
      parts.pop_back();
    } else if (!clamp) {
      return std::nullopt;
    }
  }
  return parts;
}

// Lexical normalization of an absolute path: "/a/./b/../c/" -> "/a/c" ("..": stays at "/").
std::string NormalizeAbsolute(std::string_view path) {
  const std::vector<std::string> parts = *Lexical(path, /*clamp=*/true);  // clamped: never nullopt
  std::string out;
  for (const std::string& part : parts) out += "/" + part;
  return out.empty() ? "/" : out;
}

std::string Resolve(const std::string& workdir, const std::string& path) {
  return NormalizeAbsolute(path[0] == '/' ? path : workdir + "/" + path);
}

bool ParseId(std::string_view text, uint32_t& id) {
  if (text.empty() || text.size() > 5 || !std::all_of(text.begin(), text.end(), ::isdigit)) return false;
  id = static_cast<uint32_t>(std::stoul(std::string(text)));
  return id <= 65535;
}

bool IsUserWord(std::string_view word) {
  return !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

// The state of a parse: the variables in effect and where the instructions go.
struct Parser {
  const std::map<std::string, std::string>& build_args;
  Vars args;                       // ARGs declared so far, with a value
  Vars env;                        // ENVs so far
  std::set<std::string> declared;  // every ARG name
  std::string workdir = "/";
  Recipe recipe;
  bool have_from = false;

  Vars All() const {
    Vars all = args;
    for (const auto& [key, value] : env) all[key] = value;
    return all;
  }
  Status Instruction(const Line& line);
  Status From(const Line& line, const std::string& rest);
  Status Run(const Line& line, const std::string& rest);
  Status CopyOrAdd(const Line& line, const std::string& rest, bool add);
  Status Env(const Line& line, const std::string& rest);
  Status Arg(const Line& line, const std::string& rest);
  Status Workdir(const Line& line, const std::string& rest);
  Status User(const Line& line, const std::string& rest);
};

Status Parser::Instruction(const Line& line) {
  const size_t space = line.text.find_first_of(" \t");
  std::string word = line.text.substr(0, space);
  std::transform(word.begin(), word.end(), word.begin(), ::toupper);
  const std::string rest = space == std::string::npos ? "" : Trim(line.text.substr(space));
  if (word == "ARG") return Arg(line, rest);
  if (word == "FROM") return From(line, rest);
  static const std::set<std::string> kKnown = {"RUN", "COPY", "ADD", "ENV", "WORKDIR", "USER"};
  if (kKnown.count(word) == 0) return LineError(line.number, "unknown instruction " + word);
  if (!have_from) return LineError(line.number, word + " before FROM");
  if (rest.empty()) return LineError(line.number, word + " needs an argument");
  if (recipe.steps.size() >= kMaxRecipeSteps) {
    return LineError(line.number, "more than " + std::to_string(kMaxRecipeSteps) + " steps");
  }
  if (word == "RUN") return Run(line, rest);
  if (word == "COPY" || word == "ADD") return CopyOrAdd(line, rest, word == "ADD");
  if (word == "ENV") return Env(line, rest);
  if (word == "WORKDIR") return Workdir(line, rest);
  return User(line, rest);
}

Status Parser::From(const Line& line, const std::string& rest) {
  if (have_from) return LineError(line.number, "a second FROM: multi-stage builds are not supported");
  ASSIGN_OR_RETURN(std::vector<std::string> words, Words(rest, &args, line.number));
  if (words.size() != 1) {
    return LineError(line.number, "FROM takes one image (no AS name, no --platform), got '" + rest + "'");
  }
  recipe.from = words[0];
  recipe.from_line = line.number;
  have_from = true;
  return Status();
}

Status Parser::Run(const Line& line, const std::string& rest) {
  RecipeStep step;
  step.kind = StepKind::kRun;
  step.line = line.number;
  if (rest.rfind("--", 0) == 0) return LineError(line.number, "RUN takes no flags, got " + rest.substr(0, rest.find(' ')));
  if (rest[0] == '[') {
    auto parsed = nlohmann::json::parse(rest, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_array() || parsed.empty()) {
      return LineError(line.number, "RUN [...] must be a non-empty JSON array of strings");
    }
    for (const auto& item : parsed) {
      if (!item.is_string()) return LineError(line.number, "RUN [...] must be a non-empty JSON array of strings");
      step.argv.push_back(item.get<std::string>());
    }
  } else {
    step.argv = {"/bin/sh", "-c", rest};
  }
  for (const auto& [key, value] : args) step.env.push_back(key + "=" + value);
  recipe.steps.push_back(std::move(step));
  return Status();
}

Status Parser::CopyOrAdd(const Line& line, const std::string& rest, bool add) {
  const std::string what = add ? "ADD" : "COPY";
  RecipeStep step;
  step.kind = add ? StepKind::kAdd : StepKind::kCopy;
  step.line = line.number;
  std::vector<std::string> words;
  const Vars all = All();
  std::string body = rest;
  while (body.rfind("--", 0) == 0) {
    const size_t space = body.find_first_of(" \t");
    const std::string flag = body.substr(0, space);
    body = space == std::string::npos ? "" : Trim(body.substr(space));
    if (add || flag.rfind("--chown=", 0) != 0) return LineError(line.number, what + ": unsupported flag " + flag);
    ASSIGN_OR_RETURN(std::vector<std::string> owner, Words(flag.substr(8), &all, line.number));
    const std::string text = owner.size() == 1 ? owner[0] : "";
    const size_t colon = text.find(':');
    if (!ParseId(text.substr(0, colon), step.uid) ||
        !ParseId(colon == std::string::npos ? text : text.substr(colon + 1), step.gid)) {
      return LineError(line.number, what + ": --chown takes numeric uid[:gid] up to 65535, got '" + text + "'");
    }
  }
  if (!body.empty() && body[0] == '[') {
    auto parsed = nlohmann::json::parse(body, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_array()) return LineError(line.number, what + " [...] must be a JSON array");
    for (const auto& item : parsed) {
      if (!item.is_string()) return LineError(line.number, what + " [...] must be a JSON array of strings");
      ASSIGN_OR_RETURN(std::vector<std::string> one, Words(item.get<std::string>(), &all, line.number));
      std::string joined;
      for (const std::string& w : one) joined += (joined.empty() ? "" : " ") + w;
      words.push_back(joined);
    }
  } else {
    ASSIGN_OR_RETURN(words, Words(body, &all, line.number));
  }
  if (words.size() < 2) return LineError(line.number, what + " needs a source and a destination");
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (add && words[i].find("://") != std::string::npos) {
      return LineError(line.number, "ADD: URLs are not fetched (" + words[i] + ")");
    }
    auto source = NormalizeContextPath(words[i]);
    if (!source.ok()) return LineError(line.number, what + ": source " + source.status().message());
    step.sources.push_back(*source);
  }
  const std::string& dest = words.back();
  step.dest = Resolve(workdir, dest);
  if (dest.back() == '/' && step.dest != "/") step.dest += "/";
  if (step.sources.size() > 1 && step.dest.back() != '/') {
    return LineError(line.number, what + ": several sources need a destination ending in /");
  }
  if (add && (step.sources.size() != 1 || step.dest != "/")) {
    return LineError(line.number, "ADD unpacks one local archive at / only (COPY copies files)");
  }
  recipe.steps.push_back(std::move(step));
  return Status();
}

Status Parser::Env(const Line& line, const std::string& rest) {
  const Vars all = All();
  ASSIGN_OR_RETURN(std::vector<std::string> words, Words(rest, &all, line.number));
  std::vector<std::pair<std::string, std::string>> pairs;
  if (!words.empty() && words[0].find('=') == std::string::npos) {
    // The old form: ENV KEY the rest of the line.
    const size_t space = rest.find_first_of(" \t");
    if (space == std::string::npos) return LineError(line.number, "ENV " + words[0] + " needs a value");
    ASSIGN_OR_RETURN(std::vector<std::string> value, Words(Trim(rest.substr(space)), &all, line.number));
    std::string joined;
    for (const std::string& w : value) joined += (joined.empty() ? "" : " ") + w;
    pairs.emplace_back(words[0], joined);
  } else {
    for (const std::string& word : words) {
      const size_t eq = word.find('=');
      if (eq == std::string::npos) return LineError(line.number, "ENV: '" + word + "' is not KEY=VALUE");
      pairs.emplace_back(word.substr(0, eq), word.substr(eq + 1));
    }
  }
  for (const auto& [key, value] : pairs) {
    if (!IsVarName(key)) return LineError(line.number, "ENV: bad variable name '" + key + "'");
    env[key] = value;
    recipe.steps.push_back({.kind = StepKind::kEnv, .line = line.number, .key = key, .value = value});
  }
  return Status();
}

Status Parser::Arg(const Line& line, const std::string& rest) {
  ASSIGN_OR_RETURN(std::vector<std::string> words, Words(rest, nullptr, line.number));
  if (words.size() != 1) return LineError(line.number, "ARG takes one NAME[=default]");
  const size_t eq = words[0].find('=');
  const std::string name = words[0].substr(0, eq);
  if (!IsVarName(name)) return LineError(line.number, "ARG: bad name '" + name + "'");
  declared.insert(name);
  if (auto given = build_args.find(name); given != build_args.end()) {
    args[name] = given->second;
  } else if (eq != std::string::npos) {
    const Vars all = All();
    ASSIGN_OR_RETURN(std::vector<std::string> value, Words(words[0].substr(eq + 1), &all, line.number));
    args[name] = value.empty() ? "" : value[0];
  }
  return Status();
}

Status Parser::Workdir(const Line& line, const std::string& rest) {
  const Vars all = All();
  ASSIGN_OR_RETURN(std::vector<std::string> words, Words(rest, &all, line.number));
  if (words.size() != 1 || words[0].empty()) return LineError(line.number, "WORKDIR takes one path");
  workdir = Resolve(workdir, words[0]);
  recipe.steps.push_back({.kind = StepKind::kWorkdir, .line = line.number, .path = workdir});
  return Status();
}

Status Parser::User(const Line& line, const std::string& rest) {
  const Vars all = All();
  ASSIGN_OR_RETURN(std::vector<std::string> words, Words(rest, &all, line.number));
  const std::string user = words.size() == 1 ? words[0] : "";
  const size_t colon = user.find(':');
  if (!IsUserWord(user.substr(0, colon)) || (colon != std::string::npos && !IsUserWord(user.substr(colon + 1)))) {
    return LineError(line.number, "USER takes name|uid[:group|gid], got '" + rest + "'");
  }
  recipe.steps.push_back({.kind = StepKind::kUser, .line = line.number, .user = user});
  return Status();
}

const char* KindName(StepKind kind) {
  switch (kind) {
    case StepKind::kRun: return "RUN";
    case StepKind::kCopy: return "COPY";
    case StepKind::kAdd: return "ADD";
    case StepKind::kEnv: return "ENV";
    case StepKind::kWorkdir: return "WORKDIR";
    case StepKind::kUser: return "USER";
  }
  return "?";
}

}  // namespace

std::string RecipeStep::CanonicalText() const {
  nlohmann::json json = {{"step", KindName(kind)}};
  switch (kind) {
    case StepKind::kRun: json["argv"] = argv; json["env"] = env; break;
    case StepKind::kCopy: json["uid"] = uid; json["gid"] = gid; [[fallthrough]];
    case StepKind::kAdd: json["sources"] = sources; json["dest"] = dest; break;
    case StepKind::kEnv: json["key"] = key; json["value"] = value; break;
    case StepKind::kWorkdir: json["path"] = path; break;
    case StepKind::kUser: json["user"] = user; break;
  }
  return json.dump();
}

StatusOr<std::string> NormalizeContextPath(std::string_view path) {
  if (path.empty()) return Status::Error("'' is empty", EINVAL);
  if (path.find('\0') != std::string_view::npos) return Status::Error("holds a NUL character", EINVAL);
  if (path[0] == '/') return Status::Error(std::string(path) + " is absolute: sources are in the build context", EINVAL);
  const auto parts = Lexical(path, /*clamp=*/false);
  if (!parts) return Status::Error(std::string(path) + " leaves the build context", EINVAL);
  std::string out;
  for (const std::string& part : *parts) out += (out.empty() ? "" : "/") + part;
  return out.empty() ? "." : out;
}

StatusOr<Recipe> ParseRecipe(std::string_view text, const std::map<std::string, std::string>& build_args) {
  if (text.size() > kMaxRecipeBytes) {
    return Status::Error("recipe: " + std::to_string(text.size()) + " bytes, more than " +
                             std::to_string(kMaxRecipeBytes),
                         EINVAL);
  }
  ASSIGN_OR_RETURN(std::vector<Line> lines, LogicalLines(text));
  Parser parser{build_args};
  for (const Line& line : lines) RETURN_IF_ERROR(parser.Instruction(line));
  if (!parser.have_from) return Status::Error("recipe: no FROM", EINVAL);
  for (const auto& [name, value] : build_args) {
    if (parser.declared.count(name) == 0) {
      return Status::Error("recipe: --build-arg " + name + " is not declared by an ARG", EINVAL);
    }
  }
  return std::move(parser.recipe);
}

}  // namespace corral::supervisor
