// The gRPC control plane (DeviceDaemon in protos/control.proto): version
// handshake, device properties, memory, streams, events, statistics and
// fault injection (arming, the fault log, device reset, command profile),
// IPC memory handles and communicators (communicator_service.cc).
// Per-op traffic never comes here; it goes through the command rings.
//
// Errors travel in each reply's `status` field (ErrorCode + message); the
// gRPC status stays OK so that clients have one error path.
#ifndef OPENREG_DEVICE_DAEMON_SERVER_CONTROL_SERVICE_H_
#define OPENREG_DEVICE_DAEMON_SERVER_CONTROL_SERVICE_H_

#include <string>

#include "device_daemon/collectives/communicators.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_costs.h"
#include "device_daemon/faults/fault_injector.h"
#include "device_daemon/graphs/graph_registry.h"
#include "device_daemon/ipc/ipc_exports.h"
#include "device_daemon/server/daemon_operations.h"
#include "device_daemon/sessions/session_registry.h"
#include "protos/control.grpc.pb.h"

namespace openreg::daemon {

class ControlService final : public proto::DeviceDaemon::Service {
 public:
  // `devices`, `registry`, `faults`, `costs`, `exports`,
  // `communicators`, `graphs` and `operations` must outlive the service.
  ControlService(Devices* devices, SessionRegistry* registry,
                 FaultInjector* faults, CommandCosts* costs,
                 IpcExports* exports, Communicators* communicators,
                 GraphRegistry* graphs, DaemonOperations* operations,
                 std::string attach_socket);

  grpc::Status Handshake(grpc::ServerContext* context,
                         const proto::HandshakeRequest* request,
                         proto::HandshakeReply* reply) override;
  grpc::Status Detach(grpc::ServerContext* context,
                      const proto::DetachRequest* request,
                      proto::DetachReply* reply) override;
  grpc::Status GetDeviceProperties(
      grpc::ServerContext* context,
      const proto::GetDevicePropertiesRequest* request,
      proto::GetDevicePropertiesReply* reply) override;
  grpc::Status Allocate(grpc::ServerContext* context,
                        const proto::AllocateRequest* request,
                        proto::AllocateReply* reply) override;
  grpc::Status CreateStream(grpc::ServerContext* context,
                            const proto::CreateStreamRequest* request,
                            proto::CreateStreamReply* reply) override;
  grpc::Status DestroyStream(grpc::ServerContext* context,
                             const proto::DestroyStreamRequest* request,
                             proto::DestroyStreamReply* reply) override;
  grpc::Status CreateEvent(grpc::ServerContext* context,
                           const proto::CreateEventRequest* request,
                           proto::CreateEventReply* reply) override;
  grpc::Status DestroyEvent(grpc::ServerContext* context,
                            const proto::DestroyEventRequest* request,
                            proto::DestroyEventReply* reply) override;
  grpc::Status GetStats(grpc::ServerContext* context,
                        const proto::GetStatsRequest* request,
                        proto::GetStatsReply* reply) override;
  grpc::Status TraceActivity(grpc::ServerContext* context,
                             const proto::TraceActivityRequest* request,
                             proto::TraceActivityReply* reply) override;
  grpc::Status RegisterHostRegion(
      grpc::ServerContext* context,
      const proto::RegisterHostRegionRequest* request,
      proto::RegisterHostRegionReply* reply) override;
  grpc::Status UnregisterHostRegion(
      grpc::ServerContext* context,
      const proto::UnregisterHostRegionRequest* request,
      proto::UnregisterHostRegionReply* reply) override;
  grpc::Status LoadModule(grpc::ServerContext* context,
                          const proto::LoadModuleRequest* request,
                          proto::LoadModuleReply* reply) override;
  grpc::Status UnloadModule(grpc::ServerContext* context,
                            const proto::UnloadModuleRequest* request,
                            proto::UnloadModuleReply* reply) override;
  grpc::Status IpcGetMemHandle(grpc::ServerContext* context,
                               const proto::IpcGetMemHandleRequest* request,
                               proto::IpcGetMemHandleReply* reply) override;
  grpc::Status IpcOpenMemHandle(grpc::ServerContext* context,
                                const proto::IpcOpenMemHandleRequest* request,
                                proto::IpcOpenMemHandleReply* reply) override;
  grpc::Status IpcCloseMemHandle(grpc::ServerContext* context,
                                 const proto::IpcCloseMemHandleRequest* request,
                                 proto::IpcCloseMemHandleReply* reply) override;
  grpc::Status IpcImportCount(grpc::ServerContext* context,
                              const proto::IpcImportCountRequest* request,
                              proto::IpcImportCountReply* reply) override;
  grpc::Status IpcGetEventHandle(grpc::ServerContext* context,
                                 const proto::IpcGetEventHandleRequest* request,
                                 proto::IpcGetEventHandleReply* reply) override;
  grpc::Status IpcOpenEventHandle(
      grpc::ServerContext* context,
      const proto::IpcOpenEventHandleRequest* request,
      proto::IpcOpenEventHandleReply* reply) override;
  grpc::Status IpcEventCapture(grpc::ServerContext* context,
                               const proto::IpcEventCaptureRequest* request,
                               proto::IpcEventCaptureReply* reply) override;
  grpc::Status IpcEventWait(grpc::ServerContext* context,
                            const proto::IpcEventWaitRequest* request,
                            proto::IpcEventWaitReply* reply) override;
  grpc::Status ArmFaults(grpc::ServerContext* context,
                         const proto::ArmFaultsRequest* request,
                         proto::ArmFaultsReply* reply) override;
  grpc::Status DisarmFaults(grpc::ServerContext* context,
                            const proto::DisarmFaultsRequest* request,
                            proto::DisarmFaultsReply* reply) override;
  grpc::Status ListFaults(grpc::ServerContext* context,
                          const proto::ListFaultsRequest* request,
                          proto::ListFaultsReply* reply) override;
  grpc::Status GetFaultLog(grpc::ServerContext* context,
                           const proto::GetFaultLogRequest* request,
                           proto::GetFaultLogReply* reply) override;
  grpc::Status ResetDevice(grpc::ServerContext* context,
                           const proto::ResetDeviceRequest* request,
                           proto::ResetDeviceReply* reply) override;
  grpc::Status CostProfile(grpc::ServerContext* context,
                           const proto::CostProfileRequest* request,
                           proto::CostProfileReply* reply) override;
  grpc::Status GetCommandProfile(grpc::ServerContext* context,
                                 const proto::GetCommandProfileRequest* request,
                                 proto::GetCommandProfileReply* reply) override;
  // Collectives (communicator_service.cc).
  grpc::Status CommInitRank(grpc::ServerContext* context,
                            const proto::CommInitRankRequest* request,
                            proto::CommInitRankReply* reply) override;
  grpc::Status CommDestroy(grpc::ServerContext* context,
                           const proto::CommDestroyRequest* request,
                           proto::CommDestroyReply* reply) override;
  grpc::Status CommDescribe(grpc::ServerContext* context,
                            const proto::CommDescribeRequest* request,
                            proto::CommDescribeReply* reply) override;
  // Graphs (graph_service.cc).
  grpc::Status CreateGraph(grpc::ServerContext* context,
                           const proto::CreateGraphRequest* request,
                           proto::CreateGraphReply* reply) override;
  grpc::Status DestroyGraph(grpc::ServerContext* context,
                            const proto::DestroyGraphRequest* request,
                            proto::DestroyGraphReply* reply) override;
  grpc::Status DescribeGraph(grpc::ServerContext* context,
                             const proto::DescribeGraphRequest* request,
                             proto::DescribeGraphReply* reply) override;
  // Operators (operator_service.cc).
  grpc::Status ListSessions(grpc::ServerContext* context,
                            const proto::ListSessionsRequest* request,
                            proto::ListSessionsReply* reply) override;
  grpc::Status KillSession(grpc::ServerContext* context,
                           const proto::KillSessionRequest* request,
                           proto::KillSessionReply* reply) override;
  grpc::Status Drain(grpc::ServerContext* context,
                     const proto::DrainRequest* request,
                     proto::DrainReply* reply) override;
  grpc::Status Shutdown(grpc::ServerContext* context,
                        const proto::ShutdownRequest* request,
                        proto::ShutdownReply* reply) override;
  grpc::Status SetIdleExit(grpc::ServerContext* context,
                           const proto::SetIdleExitRequest* request,
                           proto::SetIdleExitReply* reply) override;
  grpc::Status DumpFlightRecorder(
      grpc::ServerContext* context,
      const proto::DumpFlightRecorderRequest* request,
      proto::DumpFlightRecorderReply* reply) override;

 private:
  Devices* const devices_;
  SessionRegistry* const registry_;
  FaultInjector* const faults_;
  CommandCosts* const costs_;
  IpcExports* const exports_;
  Communicators* const communicators_;
  GraphRegistry* const graphs_;
  DaemonOperations* const operations_;
  const std::string attach_socket_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_SERVER_CONTROL_SERVICE_H_
