// SandboxManager: the commands of running sandboxes (sandbox_manager.h): exec, lookups, the ends
// of commands, and the commands init still held for a restarted daemon.
#include "supervisor/sandboxes/sandbox_manager.h"

#include <signal.h>

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "isolation/sandbox_spec.h"
#include "supervisor/egress/egress_proxy.h"
#include "supervisor/ids.h"
#include "supervisor/visibility.h"

namespace corral::supervisor {
namespace {

constexpr size_t kRecentCommands = 256;

}  // namespace

StatusOr<ExecRequest> SandboxManager::ExecRequestFor(const SandboxRow& row, const ExecSpec& spec) const {
  ExecRequest request;
  const std::string user = spec.user.empty() ? DefaultUserOf(row) : spec.user;
  if (user == "root") {
    request.uid = request.gid = 0;
  } else if (user == "agent") {
    request.uid = isolation::kAgentUid;
    request.gid = isolation::kAgentGid;
  } else {
    return Status::Error("user: must be \"agent\" or \"root\"", EINVAL);
  }
  const std::string home = request.uid == 0 ? "/root" : "/home/agent";
  request.cwd = spec.cwd.empty() ? home : spec.cwd;
  if (request.cwd[0] != '/') return Status::Error("cwd: must be an absolute path", EINVAL);
  request.argv = spec.argv;
  request.env = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin", "HOME=" + home,
                 std::string("USER=") + (request.uid == 0 ? "root" : "agent"), "LANG=C.UTF-8"};
  if (spec.pty) request.env.push_back("TERM=xterm-256color");
  ApplyImageConfig(row, request, !spec.cwd.empty());
  if (egress_ != nullptr) {
    for (std::string& var : EgressProxyEnvironment(static_cast<uint16_t>(config_.egress_port))) {
      request.env.push_back(std::move(var));
    }
  }
  for (std::string& var : SecretEnvironment(row)) request.env.push_back(std::move(var));
  for (const auto& var : spec.env) {
    size_t eq = var.find('=');
    if (eq == 0 || eq == std::string::npos) return Status::Error("env: bad entry " + var, EINVAL);
    std::string key = var.substr(0, eq + 1);
    request.env.erase(std::remove_if(request.env.begin(), request.env.end(),
                                     [&](const std::string& e) { return e.compare(0, key.size(), key) == 0; }),
                      request.env.end());
    request.env.push_back(var);
  }
  request.pty = spec.pty;
  request.rows = spec.rows;
  request.cols = spec.cols;
  request.stdin_open = spec.stdin_open || spec.pty;
  if (!spec.private_stdio) {
    request.stdio_owner = ExecRequest::HostIds{static_cast<uid_t>(row.uid_base + request.uid),
                                               static_cast<gid_t>(row.uid_base + request.gid)};
  }
  return request;
}

StatusOr<std::shared_ptr<Command>> SandboxManager::Exec(const Caller& caller, const UserCaps& caps,
                                                        const ExecSpec& spec) {
  ASSIGN_OR_RETURN(SandboxRow row, Owned(caller, spec.sandbox));
  auto it = live_.find(row.id);
  if (it != live_.end() && busy_[row.id] && row.state == "running") {
    return Status::Error("sandbox " + row.id + " is busy (its files are being copied); try again", EBUSY);
  }
  if (it == live_.end() || busy_[row.id] || !it->second->control) {
    return Status::Error("sandbox " + row.id + " is not running (it is " + row.state + ")", EBUSY);
  }
  std::shared_ptr<Live> live = it->second;
  if (spec.argv.empty()) return Status::Error("argv: must not be empty", EINVAL);
  uint64_t max_commands = config_.max_commands_per_sandbox;
  if (caps.commands && *caps.commands < max_commands) max_commands = *caps.commands;
  if (live->commands.size() >= max_commands) {
    return Status::Error("sandbox " + row.id + " already runs " + std::to_string(live->commands.size()) +
                             " commands (the limit)",
                         EDQUOT);
  }
  ASSIGN_OR_RETURN(ExecRequest request, ExecRequestFor(row, spec));

  CommandRow command_row;
  command_row.id = NewId("cmd");
  command_row.sandbox_id = row.id;
  command_row.iss = row.iss;
  command_row.sub = row.sub;
  command_row.argv_json = nlohmann::json(spec.argv).dump();
  command_row.pty = spec.pty;
  command_row.state = "starting";
  command_row.created_at = Now();
  ASSIGN_OR_RETURN(command_row, store_.InsertCommand(command_row));
  request.seq = static_cast<uint64_t>(command_row.init_seq);
  auto fail = [&](Status status) {
    command_row.state = "exited";
    OutcomeEvidence evidence;
    evidence.setup_failed = true;
    evidence.setup_step = status.message();
    evidence.setup_errno = status.error_number();
    command_row.outcome_json = OutcomeToJson(ClassifyOutcome(evidence)).dump();
    command_row.ended_at = Now();
    (void)store_.UpdateCommand(command_row);
    return status;
  };
  // An init that speaks version 1 gets the files that join the command's cgroup with the request,
  // and its child joins by itself before it runs anything of the command's; an older one's child
  // waits for us to move it (Command::OnSyncMessage).
  const bool self_join = live->process.init_version >= 1;
  std::vector<UniqueFd> join;
  Status made;
  if (self_join) {
    auto files = host_.CreateCommandCgroup(row.id, request.seq);
    if (!files.ok()) return fail(files.status().WithContext("the command's cgroup"));
    join = std::move(*files);
    for (const UniqueFd& fd : join) request.cgroup_join_fds.push_back(fd.get());
  }
  auto fds = SendExec(live->control_fd(), request);
  join.clear();  // init has its copies
  if (!fds.ok()) {
    if (self_join) (void)host_.RemoveCommandCgroup(row.id, request.seq);
    return fail(fds.status());
  }
  if (!self_join) made = host_.CreateCommandCgroup(row.id, request.seq).status();
  std::string sandbox_id = row.id;
  uint64_t seq = request.seq;
  auto command = std::make_shared<Command>(
      CommandContext(), command_row, live->control_fd(), std::move(*fds),
      [this, sandbox_id, seq](Command& finished) { OnCommandFinished(sandbox_id, seq, finished); });
  live->commands[seq] = command;
  commands_[command_row.id] = command;
  // Version 0: made while corral-init clones the child, which waits for us before it runs
  // anything of the command's, and without its cgroup never does (a setup failure).
  command->SetCgroup(made);
  command->Start();
  Touch(row.id);
  return command;
}

void SandboxManager::OnCommandFinished(const std::string& sandbox_id, uint64_t seq, Command& finished) {
  auto live_it = live_.find(sandbox_id);
  if (live_it != live_.end()) live_it->second->commands.erase(seq);
  // Ended commands stay reachable for a while, for clients that attach late.
  auto self = commands_.find(finished.id());
  if (self != commands_.end()) {
    recent_[finished.id()] = self->second;
    recent_order_.push_back(finished.id());
    commands_.erase(self);
    while (recent_order_.size() > kRecentCommands) {
      recent_.erase(recent_order_.front());
      recent_order_.pop_front();
    }
  }
  Touch(sandbox_id);
}

StatusOr<std::shared_ptr<Command>> SandboxManager::FindCommand(const Caller& caller, const std::string& command_id) {
  std::shared_ptr<Command> command = FindVisible(commands_, recent_, command_id, caller);
  if (!command) return NotFound("live command " + command_id);
  return command;
}

StatusOr<CommandRow> SandboxManager::GetCommand(const Caller& caller, const std::string& sandbox_id,
                                                const std::string& command_id) {
  RETURN_IF_ERROR(Owned(caller, sandbox_id).status());
  if (!IsWellFormedId(command_id, "cmd")) return NotFound("command " + command_id);
  ASSIGN_OR_RETURN(std::optional<CommandRow> row, store_.GetCommand(command_id));
  if (!row || row->sandbox_id != sandbox_id) return NotFound("command " + command_id);
  return *row;
}

StatusOr<std::vector<CommandRow>> SandboxManager::ListCommands(const Caller& caller, const std::string& sandbox_id) {
  RETURN_IF_ERROR(Owned(caller, sandbox_id).status());
  return store_.ListCommands(sandbox_id, /*active_only=*/false, 1000);
}

void SandboxManager::AdoptCommands(const std::shared_ptr<Live>& live, std::map<uint64_t, HeldCommand> held) {
  const int fd = live->control_fd();
  auto rows = store_.ListCommands(live->id, /*active_only=*/true);
  if (!rows.ok()) return;
  for (CommandRow& row : *rows) {
    auto it = held.find(static_cast<uint64_t>(row.init_seq));
    if (it == held.end()) {
      StoreLost(row, host_.CommandCgroupStats(live->id, static_cast<uint64_t>(row.init_seq)));
      continue;
    }
    row.state = "running";
    uint64_t seq = it->first;
    std::string sandbox_id = live->id;
    auto command = std::make_shared<Command>(
        CommandContext(), row, fd, it->second.state, std::move(it->second.fds),
        [this, sandbox_id, seq](Command& finished) { OnCommandFinished(sandbox_id, seq, finished); });
    live->commands[seq] = command;
    commands_[row.id] = command;
    held.erase(it);
    command->Start();
  }
  // What init holds that the store does not know (a crash between the exec and its row): let
  // it go.
  for (auto& [seq, entry] : held) {
    if (entry.state.running) (void)SendSignal(fd, seq, SIGKILL);
    else (void)SendAck(fd, seq);
  }
}

void SandboxManager::StoreLost(CommandRow& row, const StatusOr<cgroups::CgroupStats>& figures) {
  OutcomeEvidence evidence;
  evidence.lost = true;
  if (figures.ok()) {
    evidence.lost_with_stats = true;
    evidence.stats = *figures;
  }
  row.state = "exited";
  row.outcome_json = OutcomeToJson(ClassifyOutcome(evidence)).dump();
  row.ended_at = Now();
  (void)store_.UpdateCommand(row);
}

}  // namespace corral::supervisor
