// The control-plane calls of collectives (ControlService's CommInitRank,
// CommDescribe and CommDestroy): a rank joins, describes itself to the
// flight recorder and leaves a communicator once per process group; the
// collectives themselves go through the rings. DumpFlightRecorder returns
// a job's traces.
#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/collectives/flight_recorder_trace.h"
#include "device_daemon/server/control_service.h"

namespace openreg::daemon {

grpc::Status ControlService::CommInitRank(
    grpc::ServerContext*, const proto::CommInitRankRequest* request,
    proto::CommInitRankReply* reply) {
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Find(request->session());
  if (!session.ok()) {
    ToProtoStatus(session.status(), reply->mutable_status());
    return grpc::Status::OK;
  }
  const double seconds = request->timeout_seconds();
  if (!std::isfinite(seconds) || seconds <= 0) {
    ToProtoStatus(InvalidValueError("a communicator's timeout must be a "
                                    "positive number of seconds"),
                  reply->mutable_status());
    return grpc::Status::OK;
  }
  absl::StatusOr<uint64_t> handle = communicators_->Join(
      request->id(), request->size(), request->rank(), (*session)->id(),
      (*session)->pid(), absl::Seconds(std::min(seconds, 1e7)));
  if (handle.ok()) reply->set_communicator(*handle);
  ToProtoStatus(handle.status(), reply->mutable_status());
  return grpc::Status::OK;
}

grpc::Status ControlService::CommDestroy(
    grpc::ServerContext*, const proto::CommDestroyRequest* request,
    proto::CommDestroyReply* reply) {
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Find(request->session());
  const absl::Status status =
      session.ok()
          ? communicators_->Leave((*session)->id(), request->communicator(),
                                  request->abort())
          : session.status();
  // Its failures no longer taint the streams (pool streams live on).
  if (session.ok()) (*session)->ClearTaints(request->communicator());
  ToProtoStatus(status, reply->mutable_status());
  return grpc::Status::OK;
}

namespace {

// Bounds on what a client may ask the daemon to keep.
constexpr uint32_t kMaxFlightRecorderEntries = 100000;
constexpr int kMaxPathBytes = 4096;

absl::Status CheckIdentity(const proto::FlightRecorderIdentity& identity) {
  if (identity.entries() > kMaxFlightRecorderEntries) {
    return InvalidValueError(
        absl::StrCat("the flight recorder keeps at most ",
                     kMaxFlightRecorderEntries, " entries per rank, not ",
                     identity.entries(), " (lower TORCH_FR_BUFFER_SIZE)"));
  }
  if (identity.dump_prefix().size() > kMaxPathBytes) {
    return InvalidValueError("the flight recorder's dump prefix is too long");
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status ControlService::CommDescribe(
    grpc::ServerContext*, const proto::CommDescribeRequest* request,
    proto::CommDescribeReply* reply) {
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Find(request->session());
  absl::Status status = session.status();
  if (status.ok()) status = CheckIdentity(request->identity());
  if (status.ok()) {
    absl::StatusOr<Communicators::Membership> membership =
        communicators_->Find((*session)->id(), request->communicator());
    status = membership.status();
    if (membership.ok()) {
      membership->communicator->recorder().Describe(membership->rank,
                                                    request->identity());
    }
  }
  ToProtoStatus(status, reply->mutable_status());
  return grpc::Status::OK;
}

grpc::Status ControlService::DumpFlightRecorder(
    grpc::ServerContext*, const proto::DumpFlightRecorderRequest* request,
    proto::DumpFlightRecorderReply* reply) {
  pid_t pid = request->pid();
  if (request->has_session()) {
    absl::StatusOr<std::shared_ptr<Session>> session =
        registry_->Find(request->session());
    if (!session.ok()) {
      ToProtoStatus(session.status(), reply->mutable_status());
      return grpc::Status::OK;
    }
    pid = (*session)->pid();
  }
  std::vector<std::shared_ptr<Communicator>> job = communicators_->JobOf(pid);
  if (job.empty()) {
    ToProtoStatus(
        InvalidValueError(absl::StrCat(
            "process ", pid,
            " is a rank of no communicator of this daemon (openreg-ctl "
            "stats lists them and their ranks' pids)")),
        reply->mutable_status());
    return grpc::Status::OK;
  }
  for (auto& [global_rank, trace] : FlightRecorderTraces(job)) {
    proto::RankTrace* traced = reply->add_traces();
    traced->set_global_rank(global_rank);
    traced->set_trace(std::move(trace));
  }
  ToProtoStatus(absl::OkStatus(), reply->mutable_status());
  return grpc::Status::OK;
}

}  // namespace openreg::daemon
