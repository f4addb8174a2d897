// Every configuration key that the documentation names is a key corrald accepts: the `section.key`
// names in README.md and docs/*.md, and the keys dist/corrald.toml documents, each checked against
// the config parser (supervisor/config.cc). A documented key the parser refuses as unknown is a
// doc that lies (docs/PROTOCOL.md once named api.ws_queue_hard_limit, which corrald refused).
#include <dirent.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "supervisor/config.h"

namespace corral::supervisor {
namespace {

// Names in a config section's namespace that the docs use for something else: WebSocket ops and
// the sandbox event log's types (docs/PROTOCOL.md). Each must not be a key (checked below), and
// each must still be named somewhere (so the list does not outlive its reason).
const std::set<std::string> kNotConfigKeys = {
    "sandbox.watch",    // WebSocket op
    "sandbox.unwatch",  // WebSocket op
    "sandbox.egress",   // sandbox event type
    "sandbox.moved",    // sandbox event type (a drain moved it to another node)
    "sandbox.secrets",  // sandbox event type (its secrets changed)
    "sandbox.restored",  // sandbox event type (a checkpoint's files put back)
    "sandbox.created",  // sandbox event and webhook types (docs/PROTOCOL.md "Webhooks")
    "sandbox.started",
    "sandbox.stopped",
    "sandbox.destroyed",
};

struct Reference {
  std::string file;
  int line = 0;
  std::string section;
  std::string key;    // may hold '*' (a pattern such as egress.allowed_*)
  std::string value;  // "" unless the doc gives one: `network.dns = ["192.0.2.53"]`

  std::string Where() const { return file + ":" + std::to_string(line) + ": " + section + "." + key; }
};

std::string SourceDir() { return std::string(CORRAL_SOURCE_DIR) + "/"; }

// A section the parser knows: an empty table of it parses.
bool IsSection(const std::string& section) { return ParseConfig("[" + section + "]\n").ok(); }

// What the parser says of `key` in `section`: "" when it knows the key (whatever it thinks of
// the probe value), else its error.
std::string UnknownKeyError(const std::string& section, const std::string& key) {
  auto parsed = ParseConfig("[" + section + "]\n" + key + " = 0\n", "probe");
  if (parsed.ok()) return "";
  const std::string message = parsed.status().message();
  const std::string unknown = ": unknown key";
  const bool is_unknown = message.size() >= unknown.size() &&
                          message.compare(message.size() - unknown.size(), unknown.size(), unknown) == 0;
  return is_unknown ? message : "";
}

// The `section.key` names in a Markdown text's code spans: `api.max_body`, `[relay.prices]`,
// `egress.allowed_*`, `network.dns = ["192.0.2.53"]`. A span whose first word is not a config
// section (`limits.egress`, `repo.path`, `session.send`) is something else.
std::vector<Reference> MarkdownReferences(const std::string& file, const std::string& text) {
  static const std::regex kSpan("`([^`\n]+)`");
  static const std::regex kName(R"(^\[?([a-z_]+)\.([a-z_*]+)(?:\."[^"]*")?\]?(?:\s*=\s*(.+))?$)");
  std::vector<Reference> found;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  bool fenced = false;
  while (std::getline(in, line)) {
    ++number;
    if (line.rfind("```", 0) == 0) fenced = !fenced;
    if (fenced) continue;  // code blocks are shell sessions and JSON, not prose
    for (auto it = std::sregex_iterator(line.begin(), line.end(), kSpan); it != std::sregex_iterator(); ++it) {
      std::smatch name;
      const std::string span = (*it)[1].str();
      if (!std::regex_match(span, name, kName) || !IsSection(name[1].str())) continue;
      Reference ref{file, number, name[1].str(), name[2].str(), name[3].str()};
      if (kNotConfigKeys.count(ref.section + "." + ref.key)) continue;
      found.push_back(ref);
    }
  }
  return found;
}

// The keys a corrald.toml documents: `key = value` lines, commented out or not, under their
// [section] (a [relay.prices."MODEL"] table is the key relay.prices, an [[images.registry]] table
// the key images.registry).
std::vector<Reference> TomlReferences(const std::string& file, const std::string& text) {
  static const std::regex kTable(R"(^#?\s*\[\[?([a-z_]+)(?:\.([a-z_]+)[^\]]*)?\]\]?\s*$)");
  static const std::regex kKey(R"(^#?\s*([a-z_]+)\s*=\s*(.+)$)");
  std::vector<Reference> found;
  std::istringstream in(text);
  std::string line, section;
  bool subtable = false;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::smatch m;
    if (std::regex_match(line, m, kTable)) {
      section = m[1].str();
      subtable = m[2].matched;
      if (subtable) found.push_back({file, number, section, m[2].str(), ""});
    } else if (!subtable && !section.empty() && std::regex_match(line, m, kKey)) {
      found.push_back({file, number, section, m[1].str(), m[2].str()});
    }
  }
  return found;
}

std::vector<std::string> MarkdownFiles() {
  std::vector<std::string> files = {"README.md"};
  DIR* dir = opendir((SourceDir() + "docs").c_str());
  if (dir != nullptr) {
    while (struct dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.size() > 3 && name.compare(name.size() - 3, 3, ".md") == 0) files.push_back("docs/" + name);
    }
    closedir(dir);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string Read(const std::string& relative) {
  auto text = ReadFileToString(SourceDir() + relative);
  EXPECT_TRUE(text.ok()) << relative << ": " << text.status().ToString();
  return text.ok() ? *text : "";
}

// The problems of a list of references: unknown keys, patterns that match no key of `known`,
// and example values that do not parse.
std::vector<std::string> Problems(const std::vector<Reference>& refs, const std::set<std::string>& known) {
  std::vector<std::string> problems;
  for (const Reference& ref : refs) {
    if (ref.key.find('*') != std::string::npos) {
      const std::regex pattern(std::regex_replace(ref.key, std::regex(R"(\*)"), "[a-z_]*"));
      bool any = false;
      for (const std::string& name : known) {
        any = any || (name.rfind(ref.section + ".", 0) == 0 &&
                      std::regex_match(name.substr(ref.section.size() + 1), pattern));
      }
      if (!any) problems.push_back(ref.Where() + ": matches no key");
      continue;
    }
    if (std::string unknown = UnknownKeyError(ref.section, ref.key); !unknown.empty()) {
      problems.push_back(ref.Where() + ": " + unknown);
      continue;
    }
    if (!ref.value.empty()) {
      // A key that only means something beside another is tried beside it.
      std::string beside = ref.section == "store" && (ref.key == "url" || ref.key == "url_file")
                               ? "backend = \"postgresql\"\n"
                               : "";
      if (ref.section == "webhooks" && ref.key == "urls") beside = "secret_file = \"/etc/corral/webhook-secret\"\n";
      auto parsed =
          ParseConfig("[" + ref.section + "]\n" + ref.key + " = " + ref.value + "\n" + beside, ref.file);
      if (!parsed.ok()) problems.push_back(ref.Where() + " = " + ref.value + ": " + parsed.status().message());
    }
  }
  return problems;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += "  " + line + "\n";
  return out;
}

TEST(ConfigDocsTest, TheProbeTellsKnownKeysFromUnknownOnes) {
  EXPECT_EQ(UnknownKeyError("api", "max_body"), "");
  EXPECT_EQ(UnknownKeyError("relay", "prices"), "");  // a table, refused as 0, but a key
  EXPECT_EQ(UnknownKeyError("api", "max_bodyy"), "probe:2: api.max_bodyy: unknown key");
  EXPECT_TRUE(IsSection("egress"));
  EXPECT_FALSE(IsSection("limits"));
}

TEST(ConfigDocsTest, ExtractionFindsKeysAndSkipsWhatIsNotConfig) {
  const std::string md =
      "Set `api.max_body` and `[relay.prices]`, `egress.allowed_*`, `network.dns = [\"192.0.2.53\"]`.\n"
      "Not keys: `limits.egress`, `repo.path`, `sandbox.watch`, api.plain_text, `corral.v1`.\n"
      "```\n`api.in_a_code_block`\n```\n"
      "A mistake: `api.ws_queue_hard_limitt`.\n";
  std::vector<Reference> refs = MarkdownReferences("x.md", md);
  std::vector<std::string> names;
  for (const auto& ref : refs) {
    names.push_back(ref.section + "." + ref.key + (ref.value.empty() ? "" : "=" + ref.value));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"api.max_body", "relay.prices", "egress.allowed_*",
                                             "network.dns=[\"192.0.2.53\"]", "api.ws_queue_hard_limitt"}));
  // The checks have teeth: the misspelt key, a pattern without a match, a value that does not parse.
  refs.push_back({"x.md", 9, "egress", "nothing_*", ""});
  refs.push_back({"x.md", 10, "network", "dns", "[\"not an address\"]"});
  std::vector<std::string> problems = Problems(refs, {"egress.allowed_domains", "egress.allowed_ports"});
  ASSERT_EQ(problems.size(), 3u) << Join(problems);
  EXPECT_NE(problems[0].find("x.md:6: api.ws_queue_hard_limitt: "), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("egress.nothing_*: matches no key"), std::string::npos) << problems[1];
  EXPECT_NE(problems[2].find("network.dns = [\"not an address\"]"), std::string::npos) << problems[2];

  const std::string toml =
      "[api]\n# max_body = \"64M\"\nlisten = \"127.0.0.1:1\"\n# Sizes are integers: \"8G\" = 8 GiB.\n"
      "[relay.prices.\"m\"]\ninput = 3\n";
  std::vector<Reference> keys = TomlReferences("c.toml", toml);
  names.clear();
  for (const auto& ref : keys) names.push_back(ref.section + "." + ref.key);
  EXPECT_EQ(names, (std::vector<std::string>{"api.max_body", "api.listen", "relay.prices"}));
}

TEST(ConfigDocsTest, EveryKeyTheDocsNameIsARealKey) {
  // The shipped config first: its keys are the reference for patterns such as egress.allowed_*.
  const std::vector<Reference> dist = TomlReferences("dist/corrald.toml", Read("dist/corrald.toml"));
  EXPECT_GE(dist.size(), 70u);  // it documents every key
  std::vector<std::string> problems = Problems(dist, {});
  std::set<std::string> known;
  for (const Reference& ref : dist) known.insert(ref.section + "." + ref.key);

  std::set<std::string> named;
  size_t doc_refs = 0;
  for (const std::string& file : MarkdownFiles()) {
    const std::string text = Read(file);
    for (const std::string& other : kNotConfigKeys) {
      if (text.find("`" + other + "`") != std::string::npos) named.insert(other);
    }
    std::vector<Reference> refs = MarkdownReferences(file, text);
    doc_refs += refs.size();
    for (std::string& problem : Problems(refs, known)) problems.push_back(std::move(problem));
  }
  EXPECT_GE(doc_refs, 50u);  // the extraction found the docs' keys (there are more than 60)
  EXPECT_TRUE(problems.empty()) << "keys the docs name that corrald does not accept:\n" << Join(problems);

  for (const std::string& other : kNotConfigKeys) {
    const size_t dot = other.find('.');
    EXPECT_NE(UnknownKeyError(other.substr(0, dot), other.substr(dot + 1)), "") << other << " is a config key now";
    EXPECT_TRUE(named.count(other)) << other << " is named nowhere: drop it from kNotConfigKeys";
  }
}

}  // namespace
}  // namespace corral::supervisor
