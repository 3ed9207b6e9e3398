// The command phase (proto::CommandPhase) and the profiler's correlation id
// of the calling thread, stamped on every command it submits; and arming faults
// for a session, including the plan in $OPENREG_FAULT_PLAN when the session
// attaches.
#ifndef OPENREG_RUNTIME_CLIENT_COMMAND_PHASE_H_
#define OPENREG_RUNTIME_CLIENT_COMMAND_PHASE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "protos/faults.pb.h"

namespace openreg::client {

class Session;

void SetThreadCommandPhase(int phase);
int ThreadCommandPhase();

// The profiler's correlation id of the CPU op this thread runs (0: none),
// stamped on every command it submits (protos/commands.proto).
void SetThreadCorrelationId(uint64_t id);
uint64_t ThreadCorrelationId();

absl::Status ArmFaultsInSession(Session& session, const proto::FaultPlan& plan,
                                std::vector<uint32_t>* ids);

// Arms $OPENREG_FAULT_PLAN (if set) in a session that just attached.
// Errors name the variable, the file and the bad field.
absl::Status ArmFaultPlanFromEnvironment(Session& session);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_COMMAND_PHASE_H_
