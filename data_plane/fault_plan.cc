#include "data_plane/fault_plan.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "data_plane/error_codes.h"
#include "data_plane/reply_json.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "protos/commands.pb.h"

namespace openreg::faults {
namespace {

// Widest element a corruption can address (complex128).
constexpr uint32_t kMaxElementBits = 128;
constexpr uint32_t kMaxElements = 1u << 20;
constexpr absl::string_view kCollectivePrefix = "occl::";

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return MakeError(proto::INVALID_VALUE, absl::StrCat(field, ": ", why));
}

// The plan words of `type`'s values a plan may write: not CommandKind's
// MODEL_KIND, which is what leaving the kind out means.
std::vector<std::string> PlanWords(
    const google::protobuf::EnumDescriptor* type) {
  const int unset =
      type == proto::CommandKind_descriptor() ? proto::MODEL_KIND : -1;
  std::vector<std::string> words;
  for (int i = 0; i < type->value_count(); ++i) {
    if (type->value(i)->number() == unset) continue;
    words.push_back(absl::AsciiStrToLower(type->value(i)->name()));
  }
  return words;
}

// "`value` is not one of a, b, c" for a value a plan cannot hold.
std::string NotOneOf(absl::string_view value,
                     const std::vector<std::string>& allowed) {
  return absl::StrCat(value, " is not one of ", absl::StrJoin(allowed, ", "));
}

// A field's enum value outside its type (a binary request from a newer or
// hostile client: the JSON parser refuses those itself).
template <typename Enum>
absl::Status CheckEnum(absl::string_view field, int value,
                       std::vector<int> allowed = {}) {
  const google::protobuf::EnumDescriptor* type =
      google::protobuf::GetEnumDescriptor<Enum>();
  const bool known = type->FindValueByNumber(value) != nullptr;
  const bool listed =
      allowed.empty() ||
      std::find(allowed.begin(), allowed.end(), value) != allowed.end();
  if (known && listed) return absl::OkStatus();
  std::vector<std::string> words;
  if (allowed.empty()) words = PlanWords(type);
  words.reserve(allowed.size());
  for (int number : allowed) words.push_back(PlanWord(type, number));
  return Invalid(
      field, NotOneOf(known ? absl::StrCat("\"", PlanWord(type, value), "\"")
                            : absl::StrCat(value),
                      words));
}

absl::Status ValidateTrigger(const proto::Trigger& trigger,
                             proto::CommandKind kind) {
  if (trigger.has_device() && trigger.device() < 0) {
    return Invalid("trigger.device", "must be a device index (>= 0)");
  }
  if (absl::Status known =
          CheckEnum<proto::CommandKind>("trigger.kind", trigger.kind());
      !known.ok()) {
    return known;
  }
  if (!trigger.op().empty() && kind != proto::KERNEL &&
      kind != proto::COLLECTIVE) {
    return Invalid("trigger.op",
                   "only kernels and collectives have an op: set "
                   "trigger.kind to \"kernel\" or \"collective\" (or leave "
                   "it unset with a kernel model)");
  }
  if (kind == proto::COLLECTIVE && !trigger.op().empty() &&
      trigger.op().find_first_of("*?[") == std::string::npos) {
    absl::string_view bare = trigger.op();
    absl::ConsumePrefix(&bare, kCollectivePrefix);
    proto::CollectiveKind named;
    if (!proto::CollectiveKind_Parse(absl::AsciiStrToUpper(bare), &named) ||
        named == proto::COLLECTIVE_UNSPECIFIED) {
      std::vector<std::string> names;
      for (int value = proto::ALL_REDUCE; value <= proto::ALL_TO_ALLV;
           ++value) {
        names.push_back(PlanWord(proto::CollectiveKind_descriptor(), value));
      }
      return Invalid("trigger.op",
                     NotOneOf(absl::StrCat("\"", trigger.op(), "\""), names));
    }
  }
  if (kind != proto::COLLECTIVE &&
      (!trigger.group().empty() || trigger.has_rank() ||
       trigger.has_collective_number())) {
    return Invalid(!trigger.group().empty() ? "trigger.group"
                   : trigger.has_rank()     ? "trigger.rank"
                                            : "trigger.collective_number",
                   "only collectives have a group, a rank and a number: set "
                   "trigger.kind to \"collective\"");
  }
  if (trigger.has_rank() && trigger.rank() < 0) {
    return Invalid("trigger.rank", "must be a rank (>= 0)");
  }
  if (trigger.has_phase()) {
    absl::Status known =
        CheckEnum<proto::CommandPhase>("trigger.phase", trigger.phase());
    if (!known.ok()) return known;
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
  if (absl::Status known = CheckEnum<proto::Corruption::Pattern>(
          absl::StrCat(field, ".pattern"), corruption.pattern());
      !known.ok()) {
    return known;
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
      if (word_bytes != 1 && word_bytes != 2 && word_bytes != 4 &&
          word_bytes != 8) {
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
      if (spec.sticky().error() == proto::OK) return absl::OkStatus();
      return CheckEnum<proto::ErrorCode>(
          "sticky.error", spec.sticky().error(),
          {proto::ILLEGAL_ADDRESS, proto::ECC_UNCORRECTABLE});
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
  return Invalid(
      "model",
      "no fault model: set one of corrupt_output, corrupt_input, "
      "corrupt_copy, corrupt_memory, stuck_at, kernel_failure, copy_failure, "
      "allocation_failure, sticky, device_fault, device_lost, "
      "daemon_abort, disconnect, hang, slow, corrected_error");
}

// The kinds of command `spec`'s model can act on (ANY: every kind).
std::vector<proto::CommandKind> KindsFor(const proto::FaultSpec& spec) {
  const proto::CommandKind natural = DefaultKind(spec);
  // A collective's contribution and what it delivers are its input and
  // output.
  if (spec.has_corrupt_input() || spec.has_corrupt_output()) {
    return {natural, proto::COLLECTIVE};
  }
  return {natural};
}

// Models whose trigger only makes sense on some kinds of command.
absl::Status ValidateKindForModel(const proto::FaultSpec& spec) {
  const std::vector<proto::CommandKind> kinds = KindsFor(spec);
  const proto::CommandKind kind = EffectiveKind(spec);
  if (kinds[0] == proto::ANY ||
      std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) {
    return absl::OkStatus();
  }
  std::vector<std::string> words;
  words.reserve(kinds.size());
  for (const proto::CommandKind each : kinds) words.push_back(PlanWord(each));
  return Invalid(
      spec.trigger().kind() == proto::MODEL_KIND ? "trigger.op"
                                                 : "trigger.kind",
      absl::StrCat(ModelName(spec), " acts on ", absl::StrJoin(words, " and "),
                   " commands, not \"", PlanWord(kind), "\""));
}

}  // namespace

std::string PlanWord(const google::protobuf::EnumDescriptor* type, int value) {
  const google::protobuf::EnumValueDescriptor* known =
      type->FindValueByNumber(value);
  return known != nullptr ? absl::AsciiStrToLower(known->name())
                          : absl::StrCat(value);
}

std::string CollectiveOpName(int kind) {
  return absl::StrCat(kCollectivePrefix,
                      PlanWord(proto::CollectiveKind_descriptor(), kind));
}

std::string EffectiveOp(const proto::FaultSpec& spec) {
  const std::string& op = spec.trigger().op();
  if (op.empty() || EffectiveKind(spec) != proto::COLLECTIVE ||
      absl::StartsWith(op, kCollectivePrefix) ||
      op.find_first_of("*?[") != std::string::npos) {
    return op;
  }
  return absl::StrCat(kCollectivePrefix, op);
}

std::string ModelName(const proto::FaultSpec& spec) {
  if (spec.model_case() == proto::FaultSpec::MODEL_NOT_SET) return "";
  return spec.GetDescriptor()
      ->FindFieldByNumber(static_cast<int>(spec.model_case()))
      ->name();
}

proto::CommandKind DefaultKind(const proto::FaultSpec& spec) {
  switch (spec.model_case()) {
    case proto::FaultSpec::kCorruptOutput:
    case proto::FaultSpec::kCorruptInput:
    case proto::FaultSpec::kKernelFailure:
      return proto::KERNEL;
    case proto::FaultSpec::kStuckAt:
      // A stuck memory range acts after any command; a stuck element after
      // kernels.
      return spec.stuck_at().bytes() != 0 ? proto::ANY : proto::KERNEL;
    case proto::FaultSpec::kCorruptCopy:
    case proto::FaultSpec::kCopyFailure:
      return proto::COPY;
    case proto::FaultSpec::kAllocationFailure:
      return proto::ALLOCATION;
    default:
      return proto::ANY;
  }
}

proto::CommandKind EffectiveKind(const proto::FaultSpec& spec) {
  const proto::CommandKind kind = spec.trigger().kind();
  if (kind != proto::MODEL_KIND) return kind;
  if (!spec.trigger().op().empty()) return proto::KERNEL;
  return DefaultKind(spec);
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
  // Plans write enum values in lower case ("kernel"): the parser's option
  // for exactly that maps them to the declared upper-case names.
  options.case_insensitive_enum_parsing = true;
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
  // protobuf names a bad enum value by its type's URL; say which words the
  // field takes instead, as the semantic checks do.
  static const std::regex kBadEnum(
      R"(\((.*)\): invalid value (".*") for type type\.googleapis\.com/(.*))");
  std::smatch bad_enum;
  if (std::regex_match(why, bad_enum, kBadEnum)) {
    const google::protobuf::EnumDescriptor* type =
        google::protobuf::DescriptorPool::generated_pool()->FindEnumTypeByName(
            bad_enum[3].str());
    if (type != nullptr) {
      return Invalid(bad_enum[1].str(),
                     NotOneOf(bad_enum[2].str(), PlanWords(type)));
    }
  }
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

std::string PlanVocabularyJson() {
  google::protobuf::Struct vocabulary;
  auto add_words = [&](const char* key,
                       const google::protobuf::EnumDescriptor* type) {
    google::protobuf::ListValue* list =
        (*vocabulary.mutable_fields())[key].mutable_list_value();
    for (const std::string& word : PlanWords(type)) {
      list->add_values()->set_string_value(word);
    }
  };
  add_words("kinds", proto::CommandKind_descriptor());
  add_words("phases", proto::CommandPhase_descriptor());
  add_words("patterns", proto::Corruption::Pattern_descriptor());
  google::protobuf::ListValue* sticky =
      (*vocabulary.mutable_fields())["sticky_errors"].mutable_list_value();
  for (proto::ErrorCode code :
       {proto::ILLEGAL_ADDRESS, proto::ECC_UNCORRECTABLE}) {
    sticky->add_values()->set_string_value(PlanWord(code));
  }
  // A list, so that the models keep the order the contract declares them
  // in (a JSON object's keys have none).
  google::protobuf::ListValue* models =
      (*vocabulary.mutable_fields())["models"].mutable_list_value();
  const google::protobuf::OneofDescriptor* model_oneof =
      proto::FaultSpec::descriptor()->FindOneofByName("model");
  for (int i = 0; i < model_oneof->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = model_oneof->field(i);
    proto::FaultSpec spec;
    spec.GetReflection()->MutableMessage(&spec, field);
    google::protobuf::Struct* model =
        models->add_values()->mutable_struct_value();
    (*model->mutable_fields())["name"].set_string_value(field->name());
    (*model->mutable_fields())["kind"].set_string_value(
        PlanWord(DefaultKind(spec)));
    google::protobuf::ListValue* kinds =
        (*model->mutable_fields())["kinds"].mutable_list_value();
    for (const proto::CommandKind kind : KindsFor(spec)) {
      kinds->add_values()->set_string_value(PlanWord(kind));
    }
  }
  return ReplyToJson(vocabulary);
}

}  // namespace openreg::faults
