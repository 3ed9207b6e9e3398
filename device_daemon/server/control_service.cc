#include "device_daemon/server/control_service.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "data_plane/session_layout.h"
#include "data_plane/version.h"
#include "device_daemon/base/byte_size.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"
#include "device_daemon/ipc/ipc_event_wait.h"

namespace openreg::daemon {
namespace {

absl::Status InvalidDevice(int device, int count) {
  return InvalidDeviceError(absl::StrCat(
      "invalid device ", device, ": the daemon has ", count, " devices"));
}

// Runs `body` with the session named by `ref`, or reports INVALID_HANDLE in
// `status`.
template <typename Body>
void WithSession(SessionRegistry* registry, const proto::SessionRef& ref,
                 proto::Status* status, Body body) {
  absl::StatusOr<std::shared_ptr<Session>> session = registry->Find(ref);
  if (!session.ok()) {
    ToProtoStatus(session.status(), status);
    return;
  }
  ToProtoStatus(body(**session), status);
}

}  // namespace

ControlService::ControlService(Devices* devices, SessionRegistry* registry,
                               FaultInjector* faults, CommandCosts* costs,
                               IpcExports* exports,
                               Communicators* communicators,
                               GraphRegistry* graphs,
                               DaemonOperations* operations,
                               std::string attach_socket)
    : devices_(devices),
      registry_(registry),
      faults_(faults),
      costs_(costs),
      exports_(exports),
      communicators_(communicators),
      graphs_(graphs),
      operations_(operations),
      attach_socket_(std::move(attach_socket)) {}

grpc::Status ControlService::Handshake(grpc::ServerContext*,
                                       const proto::HandshakeRequest* request,
                                       proto::HandshakeReply* reply) {
  reply->set_protocol_version(kProtocolVersion);
  reply->set_daemon_version(kOpenregVersion);
  reply->set_device_count(devices_->count());
  reply->set_daemon_pid(static_cast<int32_t>(getpid()));
  reply->set_attach_socket(attach_socket_);
  if (request->protocol_version() != kProtocolVersion) {
    ToProtoStatus(
        MakeError(proto::VERSION_MISMATCH,
                  absl::StrCat("client protocol ", request->protocol_version(),
                               ", daemon protocol ", kProtocolVersion,
                               ": install matching torch_openreg and "
                               "openreg-daemon")),
        reply->mutable_status());
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::Detach(grpc::ServerContext*,
                                    const proto::DetachRequest* request,
                                    proto::DetachReply* reply) {
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Find(request->session());
  if (!session.ok()) {
    ToProtoStatus(session.status(), reply->mutable_status());
    return grpc::Status::OK;
  }
  absl::Status removed = registry_->Remove((*session)->id(), "detach request");
  if (!removed.ok()) {
    // Lost a race with the attach connection's hang-up: already gone.
    ToProtoStatus(InvalidHandleError(removed.message()),
                  reply->mutable_status());
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::GetDeviceProperties(
    grpc::ServerContext*, const proto::GetDevicePropertiesRequest* request,
    proto::GetDevicePropertiesReply* reply) {
  if (!devices_->IsValid(request->device())) {
    ToProtoStatus(InvalidDevice(request->device(), devices_->count()),
                  reply->mutable_status());
    return grpc::Status::OK;
  }
  proto::DeviceProperties* properties = reply->mutable_properties();
  properties->set_index(request->device());
  properties->set_name(kDeviceName);
  properties->set_total_memory(devices_->memory_per_device());
  properties->set_multiprocessor_count(devices_->multiprocessors());
  properties->set_major(1);
  properties->set_minor(0);
  return grpc::Status::OK;
}

grpc::Status ControlService::Allocate(grpc::ServerContext*,
                                      const proto::AllocateRequest* request,
                                      proto::AllocateReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<uint64_t> address =
                    session.Allocate(request->device(), request->size());
                if (devices_->IsValid(request->device())) {
                  const ArenaStats stats =
                      devices_->arena(request->device()).Stats();
                  reply->set_free_bytes(stats.free_bytes);
                  reply->set_total_bytes(stats.capacity);
                }
                if (!address.ok()) return address.status();
                reply->set_address(*address);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::RegisterHostRegion(
    grpc::ServerContext*, const proto::RegisterHostRegionRequest* request,
    proto::RegisterHostRegionReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<uint32_t> region = session.RegisterHostRegion(
                    request->client_fd(), request->size());
                if (!region.ok()) return region.status();
                reply->set_region(*region);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::UnregisterHostRegion(
    grpc::ServerContext*, const proto::UnregisterHostRegionRequest* request,
    proto::UnregisterHostRegionReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) {
                return session.UnregisterHostRegion(request->region());
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::LoadModule(grpc::ServerContext*,
                                        const proto::LoadModuleRequest* request,
                                        proto::LoadModuleReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<uint64_t> module =
                    session.LoadModule(request->client_fd(), request->name());
                if (!module.ok()) return module.status();
                reply->set_module(*module);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::UnloadModule(
    grpc::ServerContext*, const proto::UnloadModuleRequest* request,
    proto::UnloadModuleReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) {
                return session.UnloadModule(request->module());
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::CreateStream(
    grpc::ServerContext*, const proto::CreateStreamRequest* request,
    proto::CreateStreamReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<uint32_t> slot = session.CreateStream(
                    request->device(), request->priority());
                if (!slot.ok()) return slot.status();
                reply->set_slot(*slot);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::DestroyStream(
    grpc::ServerContext*, const proto::DestroyStreamRequest* request,
    proto::DestroyStreamReply* reply) {
  WithSession(
      registry_, request->session(), reply->mutable_status(),
      [&](Session& session) { return session.DestroyStream(request->slot()); });
  return grpc::Status::OK;
}

grpc::Status ControlService::CreateEvent(
    grpc::ServerContext*, const proto::CreateEventRequest* request,
    proto::CreateEventReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<uint32_t> slot = session.CreateEvent(
                    request->device(), request->enable_timing(),
                    request->interprocess());
                if (!slot.ok()) return slot.status();
                reply->set_slot(*slot);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::DestroyEvent(
    grpc::ServerContext*, const proto::DestroyEventRequest* request,
    proto::DestroyEventReply* reply) {
  WithSession(
      registry_, request->session(), reply->mutable_status(),
      [&](Session& session) { return session.DestroyEvent(request->slot()); });
  return grpc::Status::OK;
}

grpc::Status ControlService::TraceActivity(
    grpc::ServerContext*, const proto::TraceActivityRequest* request,
    proto::TraceActivityReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                ActivityTrace& trace = session.activity_trace();
                if (request->on()) {
                  trace.Start();
                  return absl::OkStatus();
                }
                uint64_t dropped = 0;
                for (proto::DeviceActivity& activity : trace.Stop(&dropped)) {
                  *reply->add_activities() = std::move(activity);
                }
                reply->set_dropped(dropped);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::GetStats(grpc::ServerContext*,
                                      const proto::GetStatsRequest*,
                                      proto::GetStatsReply* reply) {
  for (int device = 0; device < devices_->count(); ++device) {
    const ArenaStats arena = devices_->arena(device).Stats();
    const DeviceCounters& counters = devices_->counters(device);
    proto::DeviceStats* stats = reply->add_devices();
    stats->set_device(device);
    stats->set_total_bytes(arena.capacity);
    stats->set_allocated_bytes(arena.allocated_bytes);
    stats->set_free_bytes(arena.free_bytes);
    stats->set_largest_free_block(arena.largest_free_block);
    stats->set_allocation_count(arena.allocation_count);
    stats->set_kernels_executed(counters.kernels_executed.load());
    stats->set_copies_executed(counters.copies_executed.load());
    stats->set_kernel_failures(counters.kernel_failures.load());
    stats->set_graphs_replayed(counters.graphs_replayed.load());
    stats->set_graph_launches_decoded(counters.graph_launches_decoded.load());
    stats->set_graph_launches_reused(counters.graph_launches_reused.load());
    stats->set_graph_launches_pointwise(
        counters.graph_launches_pointwise.load());
    stats->set_launches_pointwise(counters.launches_pointwise.load());
    stats->set_graphs(graphs_->CountOnDevice(device));
    stats->set_state(DeviceStateName(devices_->health(device).state()));
    for (const auto& [model, count] : faults_->log().FiredOn(device)) {
      (*stats->mutable_faults_fired())[model] = count;
    }
    stats->set_corrected_errors(faults_->log().CorrectedErrors(device));
    stats->set_name(kDeviceName);
    DeviceScheduler& scheduler = devices_->scheduler(device);
    stats->set_utilization_percent(devices_->utilization().Percent(device));
    stats->set_busy_seconds(static_cast<double>(scheduler.BusyNanoseconds()) *
                            1e-9);
    stats->set_streams(static_cast<uint32_t>(scheduler.runners()));
    stats->set_executors(scheduler.executors());
    stats->set_host_to_device_bytes(counters.host_to_device_bytes.load());
    stats->set_device_to_host_bytes(counters.device_to_host_bytes.load());
    stats->set_device_to_device_bytes(counters.device_to_device_bytes.load());
  }
  reply->set_daemon_version(kOpenregVersion);
  reply->set_daemon_pid(getpid());
  reply->set_uptime_seconds(
      absl::ToDoubleSeconds(absl::Now() - operations_->started()));
  reply->set_utilization_window_seconds(
      absl::ToDoubleSeconds(devices_->utilization().window()));
  for (const std::shared_ptr<Session>& session : registry_->Snapshot()) {
    const SessionStatsSnapshot snapshot = session->Stats();
    proto::SessionStats* stats = reply->add_sessions();
    stats->set_session_id(snapshot.id);
    stats->set_pid(snapshot.pid);
    stats->set_allocated_bytes(snapshot.allocated_bytes);
    stats->set_streams(snapshot.streams);
    stats->set_commands_executed(snapshot.commands_executed);
    stats->set_imported_bytes(snapshot.imported_bytes);
    stats->set_modules(snapshot.modules);
  }
  for (const ExportStats& shared : exports_->Stats()) {
    proto::SharedAllocation* entry = reply->add_shared();
    entry->set_export_id(shared.export_id);
    entry->set_exporter_pid(shared.exporter_pid);
    entry->set_device(shared.device);
    entry->set_bytes(shared.bytes);
  }
  reply->set_sessions_served(registry_->sessions_served());
  const absl::Time now = absl::Now();
  for (const CommunicatorStats& communicator : communicators_->Stats()) {
    proto::CommunicatorStats* stats = reply->add_communicators();
    stats->set_id(communicator.id);
    stats->set_size(communicator.size);
    stats->set_timeout_seconds(absl::ToDoubleSeconds(communicator.timeout));
    const std::string aborted(communicator.aborted.message());
    stats->set_aborted(aborted);
    for (const CommunicatorStats::Member& member : communicator.members) {
      proto::CommunicatorMember* entry = stats->add_members();
      entry->set_rank(member.rank);
      entry->set_pid(member.pid);
      entry->set_joined(member.joined);
    }
    for (const CommunicatorStats::Pending& pending : communicator.pending) {
      proto::PendingCollective* entry = stats->add_pending();
      entry->set_number(pending.waiting.sequence);
      entry->set_operation(pending.waiting.signature);
      for (const auto& [rank, since] : pending.waiting.arrived) {
        entry->add_joined_ranks(rank);
        entry->add_joined_seconds_ago(absl::ToDoubleSeconds(now - since));
      }
      for (int rank : pending.waiting.missing) entry->add_missing_ranks(rank);
      entry->set_transfer(pending.transfer);
      entry->set_from_rank(pending.from);
      entry->set_to_rank(pending.to);
    }
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::IpcGetMemHandle(
    grpc::ServerContext*, const proto::IpcGetMemHandleRequest* request,
    proto::IpcGetMemHandleReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<std::string> handle =
                    exports_->ExportMemory(session, request->address());
                if (!handle.ok()) return handle.status();
                reply->set_handle(*std::move(handle));
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::IpcOpenMemHandle(
    grpc::ServerContext*, const proto::IpcOpenMemHandleRequest* request,
    proto::IpcOpenMemHandleReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<OpenedMemory> opened =
                    exports_->OpenMemory(session, request->handle());
                if (!opened.ok()) return opened.status();
                reply->set_address(opened->address);
                reply->set_size(opened->size);
                reply->set_device(opened->device);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::IpcCloseMemHandle(
    grpc::ServerContext*, const proto::IpcCloseMemHandleRequest* request,
    proto::IpcCloseMemHandleReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) {
                return session.CloseImported(request->address());
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::IpcImportCount(
    grpc::ServerContext*, const proto::IpcImportCountRequest* request,
    proto::IpcImportCountReply* reply) {
  WithSession(
      registry_, request->session(), reply->mutable_status(), [&](Session&) {
        const uint64_t begin = request->address();
        const uint64_t end = begin + request->size();
        uint64_t opens = 0;
        for (const std::shared_ptr<Session>& session : registry_->Snapshot()) {
          opens += session->CountOpenImports(begin, end);
        }
        reply->set_opens(opens);
        return absl::OkStatus();
      });
  return grpc::Status::OK;
}

grpc::Status ControlService::IpcGetEventHandle(
    grpc::ServerContext*, const proto::IpcGetEventHandleRequest* request,
    proto::IpcGetEventHandleReply* reply) {
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Find(request->session());
  absl::StatusOr<std::string> handle =
      session.ok() ? exports_->ExportEvent(*session, request->event_slot())
                   : absl::StatusOr<std::string>(session.status());
  if (handle.ok()) reply->set_handle(*std::move(handle));
  ToProtoStatus(handle.status(), reply->mutable_status());
  return grpc::Status::OK;
}

grpc::Status ControlService::IpcOpenEventHandle(
    grpc::ServerContext*, const proto::IpcOpenEventHandleRequest* request,
    proto::IpcOpenEventHandleReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<OpenedEvent> opened =
                    exports_->OpenEvent(session, request->handle());
                if (!opened.ok()) return opened.status();
                reply->set_event_slot(opened->event_slot);
                reply->set_device(opened->device);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::IpcEventCapture(
    grpc::ServerContext*, const proto::IpcEventCaptureRequest* request,
    proto::IpcEventCaptureReply* reply) {
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<IpcEventSource> source =
                    session.ImportedEventSource(request->event_slot());
                if (!source.ok()) return source.status();
                absl::StatusOr<IpcEventPosition> position =
                    CaptureIpcEvent(*source);
                if (!position.ok()) return position.status();
                reply->set_done(position->sequence == 0);
                reply->set_stream_slot(position->stream_slot);
                reply->set_sequence(position->sequence);
                reply->set_generation(position->generation);
                return absl::OkStatus();
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::IpcEventWait(
    grpc::ServerContext* context, const proto::IpcEventWaitRequest* request,
    proto::IpcEventWaitReply* reply) {
  // One call waits at most this long; the client calls again, so that a
  // gRPC thread is never held indefinitely.
  constexpr uint32_t kMaxWaitMs = 1000;
  WithSession(registry_, request->session(), reply->mutable_status(),
              [&](Session& session) -> absl::Status {
                absl::StatusOr<IpcEventSource> source =
                    session.ImportedEventSource(request->event_slot());
                if (!source.ok()) return source.status();
                IpcEventPosition position;
                position.stream_slot = request->stream_slot();
                position.sequence = request->sequence();
                position.generation = request->generation();
                const absl::Time deadline =
                    absl::Now() + absl::Milliseconds(std::min(
                                      request->timeout_ms(), kMaxWaitMs));
                return AwaitIpcEvent(*source, position, deadline, [&] {
                  return context->IsCancelled() || session.closed();
                });
              });
  return grpc::Status::OK;
}

grpc::Status ControlService::ArmFaults(grpc::ServerContext*,
                                       const proto::ArmFaultsRequest* request,
                                       proto::ArmFaultsReply* reply) {
  auto arm = [&](const Session* session) -> absl::Status {
    absl::StatusOr<std::vector<uint32_t>> ids =
        faults_->Arm(request->plan(), session);
    if (!ids.ok()) return ids.status();
    for (uint32_t id : *ids) reply->add_ids(id);
    return absl::OkStatus();
  };
  if (request->has_session()) {
    WithSession(registry_, request->session(), reply->mutable_status(),
                [&](Session& session) { return arm(&session); });
  } else {
    ToProtoStatus(arm(nullptr), reply->mutable_status());
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::DisarmFaults(
    grpc::ServerContext*, const proto::DisarmFaultsRequest* request,
    proto::DisarmFaultsReply* reply) {
  const std::vector<uint32_t> ids(request->ids().begin(), request->ids().end());
  auto disarm = [&](uint64_t session_id) -> absl::Status {
    absl::StatusOr<uint32_t> count = faults_->Disarm(ids, session_id);
    if (!count.ok()) return count.status();
    reply->set_disarmed(*count);
    return absl::OkStatus();
  };
  if (request->has_session()) {
    WithSession(registry_, request->session(), reply->mutable_status(),
                [&](Session& session) { return disarm(session.id()); });
  } else {
    ToProtoStatus(disarm(0), reply->mutable_status());
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::ListFaults(grpc::ServerContext*,
                                        const proto::ListFaultsRequest*,
                                        proto::ListFaultsReply* reply) {
  for (proto::ArmedFault& fault : faults_->List()) {
    *reply->add_faults() = std::move(fault);
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::GetFaultLog(
    grpc::ServerContext*, const proto::GetFaultLogRequest* request,
    proto::GetFaultLogReply* reply) {
  uint64_t next = 0;
  uint64_t dropped = 0;
  for (proto::FaultRecord& record :
       faults_->log().Read(request->since_index(), &next, &dropped)) {
    *reply->add_records() = std::move(record);
  }
  reply->set_next_index(next);
  reply->set_dropped(dropped);
  return grpc::Status::OK;
}

grpc::Status ControlService::ResetDevice(
    grpc::ServerContext*, const proto::ResetDeviceRequest* request,
    proto::ResetDeviceReply* reply) {
  if (!devices_->IsValid(request->device())) {
    ToProtoStatus(InvalidDevice(request->device(), devices_->count()),
                  reply->mutable_status());
    return grpc::Status::OK;
  }
  const int device = request->device();
  for (const std::shared_ptr<Session>& session : registry_->Snapshot()) {
    uint64_t bytes = 0;
    for (const std::shared_ptr<DeviceBuffer>& buffer : session->Allocations()) {
      if (buffer->device() == device && !buffer->lost()) {
        bytes += buffer->size();
      }
    }
    if (bytes == 0) continue;
    proto::AffectedSession* affected = reply->add_affected();
    affected->set_session_id(session->id());
    affected->set_pid(session->pid());
    affected->set_bytes(bytes);
  }
  const bool healthy = devices_->health(device).usable();
  if (healthy && reply->affected_size() > 0 && !request->force()) {
    std::vector<std::string> holders;
    for (const proto::AffectedSession& affected : reply->affected()) {
      holders.push_back(absl::StrCat("session ", affected.session_id(),
                                     " (pid ", affected.pid(), ", ",
                                     FormatByteSize(affected.bytes()), ")"));
    }
    reply->clear_affected();
    ToProtoStatus(
        MakeError(proto::INVALID_VALUE,
                  absl::StrCat("openreg:", device,
                               " is healthy and in use: a reset would lose "
                               "the memory of ",
                               absl::StrJoin(holders, ", "),
                               ". A reset is recovery from the FAULT or "
                               "lost state; force one with `openreg-ctl "
                               "device reset ",
                               device, " --force`")),
        reply->mutable_status());
    return grpc::Status::OK;
  }
  devices_->Reset(device);
  Log(LogLevel::kWarning, "openreg:", device, " was reset",
      healthy ? " while healthy (forced)" : "", "; memory of ",
      reply->affected_size(), " session(s) allocated on it before is lost");
  return grpc::Status::OK;
}

grpc::Status ControlService::GetCommandProfile(
    grpc::ServerContext*, const proto::GetCommandProfileRequest*,
    proto::GetCommandProfileReply* reply) {
  reply->set_enabled(faults_->profiling());
  for (proto::CommandCount& count : faults_->Profile()) {
    *reply->add_counts() = std::move(count);
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::CostProfile(
    grpc::ServerContext*, const proto::CostProfileRequest* request,
    proto::CostProfileReply* reply) {
  switch (request->action()) {
    case proto::CostProfileRequest::START:
      costs_->Start();
      Log(LogLevel::kInfo, "cost profile started");
      break;
    case proto::CostProfileRequest::STOP:
      costs_->Stop();
      break;
    case proto::CostProfileRequest::RESET:
      costs_->Reset();
      break;
    default:
      break;
  }
  *reply = costs_->Snapshot();
  return grpc::Status::OK;
}

}  // namespace openreg::daemon
