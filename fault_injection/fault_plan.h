// Fault plans: parsing (JSON, protobuf's parser) and the one set of
// semantic checks every fault passes before it is armed, whoever sends it
// (torch.openreg.faults, $OPENREG_FAULT_PLAN, openreg-daemon --fault_plan,
// openreg-ctl). Shared by the daemon and the clients so that a bad plan is
// refused with the same message everywhere, naming the bad field
// ("faults[2].trigger.probability: ...").
#ifndef OPENREG_FAULT_INJECTION_FAULT_PLAN_H_
#define OPENREG_FAULT_INJECTION_FAULT_PLAN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "protos/faults.pb.h"

namespace openreg::faults {

// Command kinds and phases as plans, profiles and fault records name them.
inline constexpr absl::string_view kKernelKind = "kernel";
inline constexpr absl::string_view kCopyKind = "copy";
inline constexpr absl::string_view kAllocationKind = "allocation";
inline constexpr absl::string_view kFreeKind = "free";
inline constexpr absl::string_view kOtherKind = "other";  // events, waits

// "forward", "backward", "optimizer" for proto::CommandPhase values.
absl::string_view PhaseName(int phase);
// The CommandPhase value of `name`, or -1.
int PhaseFromName(absl::string_view name);

// Who arms a fault: a client session (unscoped faults are scoped to it) or
// nobody in particular (the daemon's plan, openreg-ctl), where every fault
// must say whom it affects.
enum class ArmedBy { kSession, kOperator };

// "corrupt_output", ...: the name of the spec's model (the oneof field);
// "" when none is set.
std::string ModelName(const proto::FaultSpec& spec);

// The kind of command a model acts on when the trigger names none
// ("kernel" for output corruption, "" = any command for device models).
absl::string_view DefaultKind(const proto::FaultSpec& spec);

// The kind of command the fault's trigger matches: trigger.kind, else
// "kernel" when it names an op, else DefaultKind(); "" = any command.
std::string EffectiveKind(const proto::FaultSpec& spec);

// INVALID_VALUE naming the field when `spec` cannot be armed as given.
absl::Status ValidateFaultSpec(const proto::FaultSpec& spec, ArmedBy armed_by);

// ValidateFaultSpec for every fault; messages start with "faults[i].".
absl::Status ValidateFaultPlan(const proto::FaultPlan& plan, ArmedBy armed_by);

// Parses a plan file's text: {"faults": [...]}, or a single fault object.
// Unknown fields and bad values are INVALID_VALUE naming them. Does not
// validate (the arming side does, knowing who arms).
absl::StatusOr<proto::FaultPlan> ParseFaultPlan(absl::string_view json);

// Reads and parses a plan file; errors name the path.
absl::StatusOr<proto::FaultPlan> ReadFaultPlanFile(const std::string& path);

}  // namespace openreg::faults

#endif  // OPENREG_FAULT_INJECTION_FAULT_PLAN_H_
