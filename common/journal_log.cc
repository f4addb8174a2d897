#include "common/journal_log.h"

#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>

namespace corral {
namespace {

// syslog(3) priorities, as journalctl -p reads them.
const char* Priority(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "7";
    case LogLevel::kInfo: return "6";
    case LogLevel::kWarn: return "4";
    case LogLevel::kError: return "3";
  }
  return "6";
}

// Fields the journal gives a meaning of its own (systemd.journal-fields(7)).
bool Reserved(const std::string& name) {
  static const char* const kExact[] = {"MESSAGE", "MESSAGE_ID", "PRIORITY", "ERRNO", "INVOCATION_ID",
                                       "USER_INVOCATION_ID", "TID", "UNIT", "USER_UNIT", "DOCUMENTATION",
                                       "COMPONENT"};
  for (const char* exact : kExact) {
    if (name == exact) return true;
  }
  return name.rfind("CODE_", 0) == 0 || name.rfind("SYSLOG_", 0) == 0 || name.rfind("OBJECT_", 0) == 0 ||
         name.rfind("COREDUMP", 0) == 0;
}

// A key as a journal field name: A-Z, 0-9 and _, not starting with _ or a digit, at most 64.
std::string FieldName(std::string_view key) {
  std::string name;
  for (char c : key) {
    if (c >= 'a' && c <= 'z') name += static_cast<char>(c - 'a' + 'A');
    else if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) name += c;
    else name += '_';
  }
  if (name.empty() || name[0] == '_' || (name[0] >= '0' && name[0] <= '9') || Reserved(name)) {
    name = "CORRAL_" + name;
  }
  if (name.size() > 64) name.resize(64);
  return name;
}

// For MESSAGE: a value as logfmt writes it, quoted when it has spaces, quotes or control bytes.
std::string LogfmtValue(std::string_view value) {
  bool plain = !value.empty();
  for (unsigned char c : value) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) plain = false;
  }
  if (plain) return std::string(value);
  return "\"" + JsonEscape(value) + "\"";
}

}  // namespace

bool StderrIsJournal(const char* journal_stream) {
  if (journal_stream == nullptr) return false;
  uintmax_t device = 0, inode = 0;
  if (sscanf(journal_stream, "%" SCNuMAX ":%" SCNuMAX, &device, &inode) != 2) return false;
  struct stat st;
  if (fstat(2, &st) != 0) return false;
  return static_cast<uintmax_t>(st.st_dev) == device && static_cast<uintmax_t>(st.st_ino) == inode;
}

bool StderrIsJournal() { return StderrIsJournal(getenv("JOURNAL_STREAM")); }

std::vector<std::string> JournalFields(LogLevel level, std::string_view component, std::string_view message,
                                       LogFields fields, std::string_view identifier) {
  std::string text(message);
  for (const auto& [key, value] : fields) {
    text += ' ';
    text += key;
    text += '=';
    text += LogfmtValue(value);
  }
  std::vector<std::string> out;
  out.reserve(fields.size() + 4);
  out.push_back("MESSAGE=" + text);
  out.push_back(std::string("PRIORITY=") + Priority(level));
  out.push_back("SYSLOG_IDENTIFIER=" + std::string(identifier));
  out.push_back("COMPONENT=" + std::string(component));
  for (const auto& [key, value] : fields) out.push_back(FieldName(key) + "=" + std::string(value));
  return out;
}

bool SendToJournal(LogLevel level, std::string_view component, std::string_view message, LogFields fields) {
  const std::vector<std::string> entry = JournalFields(level, component, message, fields);
  std::vector<iovec> parts;
  parts.reserve(entry.size());
  for (const std::string& field : entry) {
    parts.push_back({const_cast<char*>(field.data()), field.size()});
  }
  return sd_journal_sendv(parts.data(), static_cast<int>(parts.size())) >= 0;
}

}  // namespace corral
