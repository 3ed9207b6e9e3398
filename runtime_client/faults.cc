// Fault injection from a client (faults.h): control-plane calls only.
#include "openreg/faults.h"

#include "data_plane/fault_plan.h"
#include "runtime_client/client.h"
#include "runtime_client/command_phase.h"
#include "runtime_client/thread_state.h"

namespace openreg {

using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::WithSession;

Error ArmFaults(const proto::FaultPlan& plan, std::vector<uint32_t>* ids) {
  if (ids == nullptr) {
    return ReturnStatus(NullArgumentError("ArmFaults", "ids"));
  }
  return ReturnStatus(WithSession([&](Session& session) {
    return client::ArmFaultsInSession(session, plan, ids);
  }));
}

Error ArmFaultsFromJson(const std::string& json, std::vector<uint32_t>* ids) {
  absl::StatusOr<proto::FaultPlan> plan = faults::ParseFaultPlan(json);
  if (!plan.ok()) return ReturnStatus(plan.status());
  return ArmFaults(*plan, ids);
}

Error DisarmFaults(const std::vector<uint32_t>& ids, uint32_t* disarmed) {
  return ReturnStatus(WithSession([&](Session& session) {
    proto::DisarmFaultsRequest request;
    session.FillRef(request.mutable_session());
    for (uint32_t id : ids) request.add_ids(id);
    proto::DisarmFaultsReply reply;
    absl::Status status =
        session.Call("DisarmFaults", &proto::DeviceDaemon::Stub::DisarmFaults,
                     request, &reply);
    if (status.ok() && disarmed != nullptr) *disarmed = reply.disarmed();
    return status;
  }));
}

Error ListFaults(proto::ListFaultsReply* reply) {
  if (reply == nullptr) {
    return ReturnStatus(NullArgumentError("ListFaults", "reply"));
  }
  return ReturnStatus(WithSession([&](Session& session) {
    reply->Clear();
    return session.Call("ListFaults", &proto::DeviceDaemon::Stub::ListFaults,
                        proto::ListFaultsRequest(), reply);
  }));
}

Error GetFaultLog(uint64_t since_index, proto::GetFaultLogReply* reply) {
  if (reply == nullptr) {
    return ReturnStatus(NullArgumentError("GetFaultLog", "reply"));
  }
  return ReturnStatus(WithSession([&](Session& session) {
    reply->Clear();
    proto::GetFaultLogRequest request;
    request.set_since_index(since_index);
    return session.Call("GetFaultLog", &proto::DeviceDaemon::Stub::GetFaultLog,
                        request, reply);
  }));
}

Error ResetDevice(int device, bool force, proto::ResetDeviceReply* reply) {
  proto::ResetDeviceReply local;
  if (reply == nullptr) reply = &local;
  return ReturnStatus(WithSession([&](Session& session) {
    reply->Clear();
    proto::ResetDeviceRequest request;
    request.set_device(device);
    request.set_force(force);
    return session.Call("ResetDevice", &proto::DeviceDaemon::Stub::ResetDevice,
                        request, reply);
  }));
}

Error GetCommandProfile(proto::GetCommandProfileReply* reply) {
  if (reply == nullptr) {
    return ReturnStatus(NullArgumentError("GetCommandProfile", "reply"));
  }
  return ReturnStatus(WithSession([&](Session& session) {
    reply->Clear();
    return session.Call("GetCommandProfile",
                        &proto::DeviceDaemon::Stub::GetCommandProfile,
                        proto::GetCommandProfileRequest(), reply);
  }));
}

void SetCommandPhase(int phase) { client::SetThreadCommandPhase(phase); }

}  // namespace openreg
