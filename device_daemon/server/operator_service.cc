// The control-plane calls of operators (ControlService's ListSessions,
// KillSession, Drain, Shutdown and SetIdleExit; openreg-ctl sessions,
// kill-session, drain, shutdown, set-idle-exit). The control socket admits
// only the daemon's uid (control_listener.h), so these need no other check.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"
#include "device_daemon/base/process_info.h"
#include "device_daemon/server/control_service.h"

namespace openreg::daemon {
namespace {

// "pid 42 (python3 train.py), pid 43 (...)": who holds the daemon.
std::string DescribeSessions(
    const std::vector<std::shared_ptr<Session>>& sessions) {
  std::vector<std::string> parts;
  parts.reserve(sessions.size());
  for (const std::shared_ptr<Session>& session : sessions) {
    parts.push_back(absl::StrCat("pid ", session->pid(), " (",
                                 ProcessCommandLine(session->pid()), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

grpc::Status ControlService::ListSessions(grpc::ServerContext*,
                                          const proto::ListSessionsRequest*,
                                          proto::ListSessionsReply* reply) {
  for (const std::shared_ptr<Session>& session : registry_->Snapshot()) {
    const SessionStatsSnapshot stats = session->Stats();
    proto::SessionInfo* info = reply->add_sessions();
    info->set_session_id(stats.id);
    info->set_pid(stats.pid);
    info->set_uid(session->uid());
    info->set_client_name(session->client_name());
    info->set_command_line(ProcessCommandLine(stats.pid));
    info->set_allocated_bytes(stats.allocated_bytes);
    info->set_streams(stats.streams);
    info->set_commands_executed(stats.commands_executed);
    for (const auto& [device, usage] : stats.devices) {
      proto::SessionDeviceUsage* entry = info->add_devices();
      entry->set_device(device);
      entry->set_allocated_bytes(usage.allocated_bytes);
      entry->set_streams(usage.streams);
    }
  }
  reply->set_draining(registry_->draining());
  reply->set_idle_exit_seconds(absl::ToDoubleSeconds(operations_->idle_exit()));
  return grpc::Status::OK;
}

grpc::Status ControlService::KillSession(
    grpc::ServerContext*, const proto::KillSessionRequest* request,
    proto::KillSessionReply* reply) {
  if ((request->pid() == 0) == (request->session_id() == 0)) {
    ToProtoStatus(InvalidValueError("name a client process (pid) or a "
                                    "session id, not both"),
                  reply->mutable_status());
    return grpc::Status::OK;
  }
  for (const std::shared_ptr<Session>& session : registry_->Snapshot()) {
    const bool named = request->pid() != 0
                           ? session->pid() == request->pid()
                           : session->id() == request->session_id();
    if (!named) continue;
    Log(LogLevel::kInfo, "openreg-ctl kill-session: ending session ",
        session->id(), " of pid ", session->pid());
    operations_->EndSession(session->id());
    reply->add_ended(session->id());
  }
  if (reply->ended().empty()) {
    ToProtoStatus(
        MakeError(proto::INVALID_VALUE,
                  request->pid() != 0
                      ? absl::StrCat("no session of pid ", request->pid(),
                                     " is attached (openreg-ctl sessions "
                                     "lists them)")
                      : absl::StrCat("session ", request->session_id(),
                                     " is not attached (openreg-ctl "
                                     "sessions lists them)")),
        reply->mutable_status());
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::Drain(grpc::ServerContext*,
                                   const proto::DrainRequest* request,
                                   proto::DrainReply* reply) {
  registry_->SetDraining(request->draining());
  Log(LogLevel::kInfo, request->draining()
                           ? "draining: new sessions are refused"
                           : "accepting new sessions again");
  reply->set_attached(static_cast<uint32_t>(registry_->attached_count()));
  return grpc::Status::OK;
}

grpc::Status ControlService::Shutdown(grpc::ServerContext*,
                                      const proto::ShutdownRequest* request,
                                      proto::ShutdownReply* reply) {
  const std::vector<std::shared_ptr<Session>> sessions = registry_->Snapshot();
  if (!sessions.empty() && !request->force()) {
    ToProtoStatus(
        MakeError(proto::INVALID_VALUE,
                  absl::StrCat(sessions.size(), " session(s) are attached: ",
                               DescribeSessions(sessions),
                               ". Let them finish first (openreg-ctl drain "
                               "refuses new ones; set-idle-exit stops the "
                               "daemon once they are gone), or end them "
                               "with --force")),
        reply->mutable_status());
    return grpc::Status::OK;
  }
  Log(LogLevel::kInfo, "openreg-ctl shutdown",
      sessions.empty()
          ? std::string()
          : absl::StrCat(" --force: ending ", sessions.size(),
                         " session(s): ", DescribeSessions(sessions)));
  reply->set_ended(static_cast<uint32_t>(sessions.size()));
  operations_->RequestStop();
  return grpc::Status::OK;
}

grpc::Status ControlService::SetIdleExit(
    grpc::ServerContext*, const proto::SetIdleExitRequest* request,
    proto::SetIdleExitReply* reply) {
  const double seconds = request->seconds();
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) {
    ToProtoStatus(InvalidValueError("the idle limit must be a number of "
                                    "seconds >= 0 (0: never exit)"),
                  reply->mutable_status());
    return grpc::Status::OK;
  }
  operations_->SetIdleExit(absl::Seconds(seconds));
  Log(LogLevel::kInfo, "idle exit set to ", seconds, " s");
  return grpc::Status::OK;
}

}  // namespace openreg::daemon
