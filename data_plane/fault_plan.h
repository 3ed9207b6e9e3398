// Fault plans: parsing (JSON, protobuf's parser) and the one set of
// semantic checks every fault passes before it is armed, whoever sends it
// (torch.openreg.faults, $OPENREG_FAULT_PLAN, openreg-daemon --fault_plan,
// openreg-ctl). Shared by the daemon and the clients so that a bad plan is
// refused with the same message everywhere, naming the bad field
// ("faults[2].trigger.probability: ...").
//
// The plan's vocabulary (command kinds, phases, corruption patterns, sticky
// errors, models) is the enums and the model oneof of protos/faults.proto;
// users write enum values in lower case ("kernel", "bit_flip"), which is
// how messages and clients show them too (PlanWord).
#ifndef OPENREG_DATA_PLANE_FAULT_PLAN_H_
#define OPENREG_DATA_PLANE_FAULT_PLAN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/generated_enum_reflection.h"
#include "protos/faults.pb.h"

namespace openreg::faults {

// The lower-case name of an enum value of the plan's vocabulary, as plans
// write it: PlanWord(proto::BACKWARD) == "backward".
std::string PlanWord(const google::protobuf::EnumDescriptor* type, int value);
template <typename Enum>
std::string PlanWord(Enum value) {
  return PlanWord(google::protobuf::GetEnumDescriptor<Enum>(),
                  static_cast<int>(value));
}

// Who arms a fault: a client session (unscoped faults are scoped to it) or
// nobody in particular (the daemon's plan, openreg-ctl), where every fault
// must say whom it affects.
enum class ArmedBy { kSession, kOperator };

// "corrupt_output", ...: the name of the spec's model (the oneof field);
// "" when none is set.
std::string ModelName(const proto::FaultSpec& spec);

// The kind of command a model acts on when the trigger names none
// (KERNEL for output corruption, ANY for device models).
proto::CommandKind DefaultKind(const proto::FaultSpec& spec);

// The kind of command the fault's trigger matches: trigger.kind, else
// KERNEL when it names an op, else DefaultKind(); ANY = every command.
proto::CommandKind EffectiveKind(const proto::FaultSpec& spec);

// "occl::all_reduce": how commands, triggers and fault records name a
// collective of `kind` (a commands.proto CollectiveKind).
std::string CollectiveOpName(int kind);

// The op pattern `spec`'s trigger matches command names with: trigger.op,
// with "occl::" added to a collective's bare name ("all_reduce").
std::string EffectiveOp(const proto::FaultSpec& spec);

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

// The vocabulary, as JSON, for clients that build plans (openreg-fi):
// {"kinds": [...], "phases": [...], "patterns": [...], "sticky_errors":
// [...], "models": [{"name": "corrupt_output", "kind": "kernel", "kinds":
// ["kernel", "collective"]}, ...]} (every model in declaration order, with
// its DefaultKind and every kind it can act on).
std::string PlanVocabularyJson();

}  // namespace openreg::faults

#endif  // OPENREG_DATA_PLANE_FAULT_PLAN_H_
