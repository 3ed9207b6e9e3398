// The control-plane calls of graphs (ControlService's CreateGraph,
// DestroyGraph and DescribeGraph): once per capture, reset and debug dump;
// replays go through the rings (ReplayGraph commands).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/server/control_service.h"

namespace openreg::daemon {

grpc::Status ControlService::CreateGraph(
    grpc::ServerContext*, const proto::CreateGraphRequest* request,
    proto::CreateGraphReply* reply) {
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Find(request->session());
  if (!session.ok()) {
    ToProtoStatus(session.status(), reply->mutable_status());
    return grpc::Status::OK;
  }
  if (request->device() < 0 || request->device() >= devices_->count()) {
    ToProtoStatus(
        MakeError(proto::INVALID_DEVICE,
                  absl::StrCat("a graph on openreg:", request->device(),
                               ", but the daemon has ", devices_->count(),
                               " devices")),
        reply->mutable_status());
    return grpc::Status::OK;
  }
  const std::vector<std::string> commands(request->commands().begin(),
                                          request->commands().end());
  absl::StatusOr<uint64_t> graph = graphs_->Create(
      (*session)->id(), request->device(), commands, request->generators());
  if (graph.ok()) reply->set_graph(*graph);
  ToProtoStatus(graph.status(), reply->mutable_status());
  return grpc::Status::OK;
}

grpc::Status ControlService::DestroyGraph(
    grpc::ServerContext*, const proto::DestroyGraphRequest* request,
    proto::DestroyGraphReply* reply) {
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Find(request->session());
  ToProtoStatus(session.ok()
                    ? graphs_->Destroy((*session)->id(), request->graph())
                    : session.status(),
                reply->mutable_status());
  return grpc::Status::OK;
}

grpc::Status ControlService::DescribeGraph(
    grpc::ServerContext*, const proto::DescribeGraphRequest* request,
    proto::DescribeGraphReply* reply) {
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Find(request->session());
  if (!session.ok()) {
    ToProtoStatus(session.status(), reply->mutable_status());
    return grpc::Status::OK;
  }
  absl::StatusOr<std::string> text =
      graphs_->Describe((*session)->id(), request->graph());
  ToProtoStatus(text.status(), reply->mutable_status());
  if (text.ok()) reply->set_text(*std::move(text));
  return grpc::Status::OK;
}

}  // namespace openreg::daemon
