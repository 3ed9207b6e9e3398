// The control-plane calls of collectives (ControlService's CommInitRank and
// CommDestroy): a rank joins or leaves a communicator once per process
// group; the collectives themselves go through the rings.
#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/time/time.h"
#include "device_daemon/base/errors.h"
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

}  // namespace openreg::daemon
