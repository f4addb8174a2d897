// corrald's log lines as journal entries when systemd connected its stderr to the journal: the
// same information as the JSON line on stderr (common/log.h), as fields that journalctl can
// filter on.
//
//   if (corral::StderrIsJournal()) corral::SetLogSink(corral::SendToJournal);
//   LogError("sandbox", "start failed", {{"sandbox", id}, {"error", "..."}})
//   -> MESSAGE=start failed sandbox=sb_x error="..."   PRIORITY=3   SYSLOG_IDENTIFIER=corrald
//      COMPONENT=sandbox   SANDBOX=sb_x   ERROR=...
//   journalctl -u corrald SANDBOX=sb_x -o json
//
// The journal stamps the time itself. Field names are the keys in upper case (request_id ->
// REQUEST_ID); a key that would be one of the journal's own fields (MESSAGE, PRIORITY, ERRNO,
// CODE_*, SYSLOG_*, ...) gets a CORRAL_ prefix.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"

namespace corral {

// True when JOURNAL_STREAM ("device:inode") names the file that fd 2 is: systemd's way of telling
// a service that its stderr goes to the journal. `journal_stream` is the variable's value.
bool StderrIsJournal(const char* journal_stream);
bool StderrIsJournal();

// The entry's "NAME=value" fields, for SendToJournal and for tests.
std::vector<std::string> JournalFields(LogLevel level, std::string_view component, std::string_view message,
                                       LogFields fields, std::string_view identifier = "corrald");

// A LogSink: one entry through sd_journal_sendv. False when the journal refused it.
bool SendToJournal(LogLevel level, std::string_view component, std::string_view message, LogFields fields);

}  // namespace corral
