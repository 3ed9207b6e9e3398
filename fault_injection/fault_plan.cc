#include "fault_injection/fault_plan.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "data_plane/error_codes.h"
#include "google/protobuf/util/json_util.h"
#include "protos/commands.pb.h"

namespace openreg::faults {
namespace {

// Widest element a corruption can address (complex128).
constexpr uint32_t kMaxElementBits = 128;
constexpr uint32_t kMaxElements = 1u << 20;

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return MakeError(proto::INVALID_VALUE, absl::StrCat(field, ": ", why));
}

bool IsOneOf(absl::string_view value,
             std::initializer_list<absl::string_view> allowed) {
  for (absl::string_view candidate : allowed) {
    if (value == candidate) return true;
  }
  return false;
}

absl::Status ValidateTrigger(const proto::Trigger& trigger,
                             absl::string_view kind) {
  if (trigger.has_device() && trigger.device() < 0) {
    return Invalid("trigger.device", "must be a device index (>= 0)");
  }
  if (!IsOneOf(trigger.kind(), {"", kKernelKind, kCopyKind, kAllocationKind,
                                kFreeKind, kOtherKind, "any"})) {
    return Invalid("trigger.kind",
                   absl::StrCat("\"", trigger.kind(),
                                "\" is not one of kernel, copy, allocation, "
                                "free, other, any"));
  }
  if (!trigger.op().empty() && kind != kKernelKind) {
    return Invalid("trigger.op",
                   "only kernels have an op: set trigger.kind to \"kernel\" "
                   "(or leave it unset with a kernel model)");
  }
  if (!trigger.phase().empty() && PhaseFromName(trigger.phase()) < 0) {
    return Invalid("trigger.phase",
                   absl::StrCat("\"", trigger.phase(),
                                "\" is not one of forward, backward, "
                                "optimizer"));
  }
  const int counters =
      (trigger.nth() != 0) + (trigger.after() != 0) + (trigger.every() != 0);
  if (counters > 1) {
    return Invalid("trigger", "set at most one of nth, after and every");
  }
  if (trigger.has_probability() &&
      !(trigger.probability() > 0 && trigger.probability() <= 1)) {
    return Invalid("trigger.probability",
                   absl::StrCat(trigger.probability(), " is not in (0, 1]"));
  }
  const double start = trigger.window_start_seconds();
  if (trigger.has_window_start_seconds() &&
      !(std::isfinite(start) && start >= 0)) {
    return Invalid("trigger.window_start_seconds",
                   "must be a finite number of seconds >= 0");
  }
  if (trigger.has_window_end_seconds() &&
      !(std::isfinite(trigger.window_end_seconds()) &&
        trigger.window_end_seconds() > start)) {
    return Invalid("trigger.window_end_seconds",
                   "must be finite and later than window_start_seconds");
  }
  return absl::OkStatus();
}

absl::Status ValidateCorruption(absl::string_view field,
                                const proto::Corruption& corruption) {
  if (!IsOneOf(corruption.pattern(),
               {"", "bit_flip", "random_value", "zero"})) {
    return Invalid(absl::StrCat(field, ".pattern"),
                   absl::StrCat("\"", corruption.pattern(),
                                "\" is not one of bit_flip, random_value, "
                                "zero"));
  }
  if (corruption.bit_count() > kMaxElementBits) {
    return Invalid(absl::StrCat(field, ".bit_count"),
                   absl::StrCat("at most ", kMaxElementBits));
  }
  for (uint32_t bit : corruption.bits()) {
    if (bit >= kMaxElementBits) {
      return Invalid(absl::StrCat(field, ".bits"),
                     absl::StrCat("bit ", bit, " is beyond any element (< ",
                                  kMaxElementBits, ")"));
    }
  }
  const uint32_t min_bit = corruption.min_bit();
  const uint32_t max_bit =
      corruption.has_max_bit() ? corruption.max_bit() : kMaxElementBits - 1;
  if (min_bit > max_bit || max_bit >= kMaxElementBits) {
    return Invalid(absl::StrCat(field, ".min_bit"),
                   absl::StrCat("[", min_bit, ", ", max_bit,
                                "] is not a range of bit positions below ",
                                kMaxElementBits));
  }
  if (corruption.has_element() && corruption.element() < 0) {
    return Invalid(absl::StrCat(field, ".element"), "must be >= 0");
  }
  if (corruption.elements() > kMaxElements) {
    return Invalid(absl::StrCat(field, ".elements"),
                   absl::StrCat("at most ", kMaxElements));
  }
  return absl::OkStatus();
}

absl::Status ValidateModel(const proto::FaultSpec& spec) {
  switch (spec.model_case()) {
    case proto::FaultSpec::kCorruptOutput:
      return ValidateCorruption("corrupt_output", spec.corrupt_output());
    case proto::FaultSpec::kCorruptCopy:
      return ValidateCorruption("corrupt_copy", spec.corrupt_copy());
    case proto::FaultSpec::kCorruptMemory:
      return ValidateCorruption("corrupt_memory", spec.corrupt_memory());
    case proto::FaultSpec::kCorruptInput:
      return ValidateCorruption("corrupt_input", spec.corrupt_input());
    case proto::FaultSpec::kStuckAt: {
      const proto::StuckAt& stuck = spec.stuck_at();
      if (stuck.value() > 1) return Invalid("stuck_at.value", "must be 0 or 1");
      const uint32_t word_bytes =
          stuck.word_bytes() == 0 ? 4 : stuck.word_bytes();
      if (!IsOneOf(absl::StrCat(word_bytes), {"1", "2", "4", "8"})) {
        return Invalid("stuck_at.word_bytes", "must be 1, 2, 4 or 8");
      }
      if (stuck.bytes() != 0 && stuck.bit() >= word_bytes * 8) {
        return Invalid("stuck_at.bit", absl::StrCat("must be below the word's ",
                                                    word_bytes * 8, " bits"));
      }
      if (stuck.bit() >= kMaxElementBits) {
        return Invalid("stuck_at.bit", "beyond any element");
      }
      if (stuck.bytes() != 0 && stuck.address() == 0) {
        return Invalid("stuck_at.address",
                       "a memory range needs its device address "
                       "(tensor.data_ptr())");
      }
      if (stuck.has_element() && stuck.element() < 0) {
        return Invalid("stuck_at.element", "must be >= 0");
      }
      return absl::OkStatus();
    }
    case proto::FaultSpec::kSticky:
      if (!IsOneOf(spec.sticky().error(),
                   {"", "illegal_address", "ecc_uncorrectable"})) {
        return Invalid("sticky.error",
                       absl::StrCat("\"", spec.sticky().error(),
                                    "\" is not one of illegal_address, "
                                    "ecc_uncorrectable"));
      }
      return absl::OkStatus();
    case proto::FaultSpec::kHang:
      if (!(std::isfinite(spec.hang().seconds()) &&
            spec.hang().seconds() >= 0)) {
        return Invalid("hang.seconds", "must be >= 0 (0 = forever)");
      }
      return absl::OkStatus();
    case proto::FaultSpec::kSlow: {
      const proto::Slow& slow = spec.slow();
      if (!(std::isfinite(slow.delay_seconds()) && slow.delay_seconds() >= 0)) {
        return Invalid("slow.delay_seconds", "must be >= 0");
      }
      if (!(std::isfinite(slow.factor()) &&
            (slow.factor() == 0 || slow.factor() >= 1))) {
        return Invalid("slow.factor", "must be >= 1 (or unset)");
      }
      if (slow.delay_seconds() == 0 && slow.factor() == 0) {
        return Invalid("slow", "set delay_seconds and/or factor");
      }
      return absl::OkStatus();
    }
    case proto::FaultSpec::kKernelFailure:
    case proto::FaultSpec::kCopyFailure:
    case proto::FaultSpec::kAllocationFailure:
    case proto::FaultSpec::kDeviceFault:
    case proto::FaultSpec::kDeviceLost:
    case proto::FaultSpec::kDaemonAbort:
    case proto::FaultSpec::kDisconnect:
    case proto::FaultSpec::kCorrectedError:
      return absl::OkStatus();
    case proto::FaultSpec::MODEL_NOT_SET:
      break;
  }
  return Invalid("model",
                 "no fault model: set one of corrupt_output, corrupt_input, "
                 "corrupt_copy, corrupt_memory, stuck_at, kernel_failure, copy_failure, "
                 "allocation_failure, sticky, device_fault, device_lost, "
                 "daemon_abort, disconnect, hang, slow, corrected_error");
}

// Models whose trigger only makes sense on one kind of command.
absl::Status ValidateKindForModel(const proto::FaultSpec& spec) {
  const absl::string_view natural = DefaultKind(spec);
  const std::string kind = EffectiveKind(spec);
  if (natural.empty() || kind == natural) return absl::OkStatus();
  return Invalid(spec.trigger().kind().empty() ? "trigger.op" : "trigger.kind",
                 absl::StrCat(ModelName(spec), " acts on ", natural,
                              " commands, not \"", kind, "\""));
}

}  // namespace

absl::string_view PhaseName(int phase) {
  switch (phase) {
    case proto::PHASE_BACKWARD:
      return "backward";
    case proto::PHASE_OPTIMIZER:
      return "optimizer";
    default:
      return "forward";
  }
}

int PhaseFromName(absl::string_view name) {
  if (name == "forward") return proto::PHASE_FORWARD;
  if (name == "backward") return proto::PHASE_BACKWARD;
  if (name == "optimizer") return proto::PHASE_OPTIMIZER;
  return -1;
}

std::string ModelName(const proto::FaultSpec& spec) {
  if (spec.model_case() == proto::FaultSpec::MODEL_NOT_SET) return "";
  return spec.GetDescriptor()
      ->FindFieldByNumber(static_cast<int>(spec.model_case()))
      ->name();
}

absl::string_view DefaultKind(const proto::FaultSpec& spec) {
  switch (spec.model_case()) {
    case proto::FaultSpec::kCorruptOutput:
    case proto::FaultSpec::kCorruptInput:
    case proto::FaultSpec::kKernelFailure:
    case proto::FaultSpec::kStuckAt:
      return spec.model_case() == proto::FaultSpec::kStuckAt &&
                     spec.stuck_at().bytes() != 0
                 ? absl::string_view()
                 : kKernelKind;
    case proto::FaultSpec::kCorruptCopy:
    case proto::FaultSpec::kCopyFailure:
      return kCopyKind;
    case proto::FaultSpec::kAllocationFailure:
      return kAllocationKind;
    default:
      return {};
  }
}

std::string EffectiveKind(const proto::FaultSpec& spec) {
  const std::string& kind = spec.trigger().kind();
  if (kind == "any") return "";
  if (!kind.empty()) return kind;
  if (!spec.trigger().op().empty()) return std::string(kKernelKind);
  return std::string(DefaultKind(spec));
}

absl::Status ValidateFaultSpec(const proto::FaultSpec& spec, ArmedBy armed_by) {
  if (absl::Status model = ValidateModel(spec); !model.ok()) return model;
  if (absl::Status kind = ValidateKindForModel(spec); !kind.ok()) return kind;
  absl::Status trigger = ValidateTrigger(spec.trigger(), EffectiveKind(spec));
  if (!trigger.ok()) return trigger;
  if (armed_by == ArmedBy::kOperator && !spec.daemon_wide() &&
      !spec.trigger().has_pid()) {
    return Invalid("daemon_wide",
                   "a fault armed outside a client session (a daemon plan, "
                   "openreg-ctl) must say whom it affects: set "
                   "\"daemon_wide\": true or trigger.pid");
  }
  return absl::OkStatus();
}

absl::Status ValidateFaultPlan(const proto::FaultPlan& plan, ArmedBy armed_by) {
  for (int i = 0; i < plan.faults_size(); ++i) {
    absl::Status valid = ValidateFaultSpec(plan.faults(i), armed_by);
    if (!valid.ok()) {
      return MakeError(ErrorCodeOf(valid),
                       absl::StrCat("faults[", i, "].", valid.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::FaultPlan> ParseFaultPlan(absl::string_view json) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const std::string text(json);
  proto::FaultPlan plan;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(text, &plan, options);
  if (parsed.ok()) return plan;
  // A file may also hold one fault on its own.
  proto::FaultSpec spec;
  const auto single =
      google::protobuf::util::JsonStringToMessage(text, &spec, options);
  if (single.ok()) {
    *plan.add_faults() = spec;
    return plan;
  }
  const bool looks_like_plan = absl::StrContains(json, "\"faults\"");
  const std::string why(looks_like_plan ? parsed.message() : single.message());
  return MakeError(proto::INVALID_VALUE,
                   absl::StrCat("malformed fault plan: ", why,
                                " (see docs/FAULT_INJECTION.md for the "
                                "schema)"));
}

absl::StatusOr<proto::FaultPlan> ReadFaultPlanFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    return MakeError(proto::INVALID_VALUE,
                     absl::StrCat("cannot read fault plan ", path));
  }
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<proto::FaultPlan> plan = ParseFaultPlan(text.str());
  if (!plan.ok()) {
    return MakeError(ErrorCodeOf(plan.status()),
                     absl::StrCat(path, ": ", plan.status().message()));
  }
  return plan;
}

}  // namespace openreg::faults
