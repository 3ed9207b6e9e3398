#include "runtime_client/command_phase.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "data_plane/error_codes.h"
#include "data_plane/fault_plan.h"
#include "runtime_client/session.h"

namespace openreg::client {
namespace {

thread_local int thread_phase = 0;
thread_local uint64_t thread_correlation_id = 0;

}  // namespace

void SetThreadCommandPhase(int phase) { thread_phase = phase; }
int ThreadCommandPhase() { return thread_phase; }

void SetThreadCorrelationId(uint64_t id) { thread_correlation_id = id; }
uint64_t ThreadCorrelationId() { return thread_correlation_id; }

absl::Status ArmFaultsInSession(Session& session, const proto::FaultPlan& plan,
                                std::vector<uint32_t>* ids) {
  // The daemon validates too; checking here gives the same message without
  // a round trip.
  absl::Status valid =
      faults::ValidateFaultPlan(plan, faults::ArmedBy::kSession);
  if (!valid.ok()) return valid;
  proto::ArmFaultsRequest request;
  session.FillRef(request.mutable_session());
  *request.mutable_plan() = plan;
  proto::ArmFaultsReply reply;
  absl::Status armed = session.Call(
      "ArmFaults", &proto::DeviceDaemon::Stub::ArmFaults, request, &reply);
  if (!armed.ok()) return armed;
  if (ids != nullptr) ids->assign(reply.ids().begin(), reply.ids().end());
  return absl::OkStatus();
}

absl::Status ArmFaultPlanFromEnvironment(Session& session) {
  const char* path = std::getenv("OPENREG_FAULT_PLAN");
  if (path == nullptr || *path == '\0') return absl::OkStatus();
  absl::StatusOr<proto::FaultPlan> plan = faults::ReadFaultPlanFile(path);
  absl::Status status = plan.status();
  if (status.ok()) status = ArmFaultsInSession(session, *plan, nullptr);
  if (status.ok()) return status;
  return openreg::MakeError(
      ErrorCodeOf(status),
      absl::StrCat("openreg: OPENREG_FAULT_PLAN=", path, ": ", status.message(),
                   " (nothing was armed)"));
}

}  // namespace openreg::client
