#include "device_daemon/faults/fault_injector.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "data_plane/device_address.h"
#include "data_plane/dtype.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"
#include "device_daemon/devices/blocking_region.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/faults/corruption.h"
#include "device_daemon/sessions/session.h"
#include "fault_injection/fault_plan.h"

namespace openreg::daemon {

struct FaultInjector::ArmedFault {
  ArmedFault(uint32_t id, const proto::FaultSpec& spec, uint64_t session_id)
      : id(id),
        spec(spec),
        model(faults::ModelName(spec)),
        name(spec.name().empty() ? absl::StrCat("fault ", id) : spec.name()),
        trigger(spec, session_id, absl::Now()) {}

  // "injected fault 'name' (model, fault 3)": how errors and logs name it.
  std::string Describe() const {
    return absl::StrCat("injected fault '", name, "' (", model, ", fault ", id,
                        ")");
  }

  const uint32_t id;
  const proto::FaultSpec spec;
  const std::string model;
  const std::string name;
  FaultTrigger trigger;
};

namespace {

// Raw memory (copies, memory at rest) is corrupted per 64-bit word, the
// unit real DRAM ECC protects.
constexpr int kMemoryWordBytes = 8;
constexpr int kAllocationRetries = 5;
// Sleeps of hung and slowed commands are cut into slices so that session
// teardown is noticed.
constexpr absl::Duration kSleepSlice = absl::Milliseconds(20);

absl::string_view KindOf(const proto::Command& command) {
  switch (command.body_case()) {
    case proto::Command::kLaunch:
      return faults::kKernelKind;
    case proto::Command::kH2D:
    case proto::Command::kD2H:
    case proto::Command::kD2D:
    case proto::Command::kMemset:
      return faults::kCopyKind;
    case proto::Command::kFree:
      return faults::kFreeKind;
    default:
      return faults::kOtherKind;
  }
}

CommandFacts FactsOf(const StreamContext& context,
                     const proto::Command& command, const std::string& name) {
  CommandFacts facts;
  facts.session_id = context.session->id();
  facts.pid = context.session->pid();
  facts.device = context.device;
  facts.stream = context.slot_index;
  facts.kind = KindOf(command);
  facts.phase = command.phase();
  facts.sequence = command.sequence();
  if (command.has_launch()) {
    facts.name = command.launch().name();
    facts.overload = command.launch().overload();
    facts.written_tensors = command.launch().outputs_size();
    for (const proto::Argument& argument : command.launch().arguments()) {
      facts.tensor_arguments += argument.has_tensor() ? 1 : 0;
    }
  } else {
    facts.name = name;
  }
  return facts;
}

// The device tensors among a launch's arguments, in order.
WrittenTensors TensorArguments(const proto::Command& command) {
  WrittenTensors tensors;
  for (const proto::Argument& argument : command.launch().arguments()) {
    if (argument.has_tensor()) tensors.push_back(argument.tensor());
  }
  return tensors;
}

// Sleeps `duration` (forever when infinite) unless the stream is stopped.
void SleepUnlessStopped(const StreamContext* context, absl::Duration duration) {
  // A hung or slowed command keeps its executor; the device's other streams
  // get another one meanwhile.
  BlockingRegion blocking;
  const absl::Time until = absl::Now() + duration;
  while (absl::Now() < until) {
    if (context != nullptr && context->stop_requested()) return;
    absl::SleepFor(std::min(kSleepSlice, until - absl::Now()));
  }
}

std::string Where(const CommandFacts& facts) {
  std::string op = facts.overload.empty()
                       ? std::string(facts.name)
                       : absl::StrCat(facts.name, ".", facts.overload);
  if (facts.kind == faults::kAllocationKind) {
    return absl::StrCat("an allocation on openreg:", facts.device);
  }
  return absl::StrCat(op, " on openreg:", facts.device, " stream ",
                      facts.stream);
}

}  // namespace

FaultInjector::FaultInjector(Devices* devices, bool profile_commands)
    : devices_(devices),
      profile_commands_(profile_commands),
      active_(profile_commands) {}

void FaultInjector::SetDisconnectHandler(
    std::function<void(uint64_t session_id)> handler) {
  absl::MutexLock lock(&mutex_);
  disconnect_ = std::move(handler);
}

void FaultInjector::UpdateActive() {
  active_.store(profile_commands_ || !faults_.empty(),
                std::memory_order_release);
}

absl::StatusOr<std::vector<uint32_t>> FaultInjector::Arm(
    const proto::FaultPlan& plan, const Session* session) {
  absl::Status valid = faults::ValidateFaultPlan(
      plan, session != nullptr ? faults::ArmedBy::kSession
                               : faults::ArmedBy::kOperator);
  if (!valid.ok()) return valid;
  for (const proto::FaultSpec& spec : plan.faults()) {
    if (spec.trigger().has_device() &&
        !devices_->IsValid(spec.trigger().device())) {
      return MakeError(
          proto::INVALID_DEVICE,
          absl::StrCat("trigger.device: the daemon has ", devices_->count(),
                       " devices, not ", spec.trigger().device() + 1));
    }
  }
  const uint64_t session_id = session != nullptr ? session->id() : 0;
  std::vector<uint32_t> ids;
  absl::MutexLock lock(&mutex_);
  for (const proto::FaultSpec& spec : plan.faults()) {
    const uint32_t id = next_id_++;
    faults_.push_back(std::make_shared<ArmedFault>(
        id, spec, spec.daemon_wide() ? 0 : session_id));
    ids.push_back(id);
    Log(LogLevel::kInfo, "armed ", faults_.back()->Describe(),
        session_id != 0 ? absl::StrCat(" for session ", session_id) : "");
  }
  UpdateActive();
  return ids;
}

absl::StatusOr<uint32_t> FaultInjector::Disarm(const std::vector<uint32_t>& ids,
                                               uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  auto owned = [&](const ArmedFault& fault) {
    return session_id == 0 || fault.trigger.session_id() == session_id;
  };
  for (uint32_t id : ids) {
    const bool found = std::any_of(
        faults_.begin(), faults_.end(),
        [&](const auto& fault) { return fault->id == id && owned(*fault); });
    if (!found) {
      return MakeError(
          proto::INVALID_HANDLE,
          absl::StrCat("fault ", id, " is not armed",
                       session_id != 0 ? " by this session" : "",
                       " (torch.openreg.faults.list() shows the armed ones)"));
    }
  }
  const size_t before = faults_.size();
  faults_.erase(std::remove_if(faults_.begin(), faults_.end(),
                               [&](const auto& fault) {
                                 if (!owned(*fault)) return false;
                                 return ids.empty() ||
                                        std::find(ids.begin(), ids.end(),
                                                  fault->id) != ids.end();
                               }),
                faults_.end());
  UpdateActive();
  return static_cast<uint32_t>(before - faults_.size());
}

std::vector<proto::ArmedFault> FaultInjector::List() const {
  absl::ReaderMutexLock lock(&mutex_);
  std::vector<proto::ArmedFault> list;
  for (const auto& fault : faults_) {
    proto::ArmedFault& entry = list.emplace_back();
    entry.set_id(fault->id);
    *entry.mutable_spec() = fault->spec;
    entry.set_session_id(fault->trigger.session_id());
    entry.set_matches(fault->trigger.matches());
    entry.set_fired(fault->trigger.fired());
  }
  return list;
}

void FaultInjector::SessionClosed(uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  faults_.erase(std::remove_if(faults_.begin(), faults_.end(),
                               [&](const auto& fault) {
                                 return fault->trigger.session_id() ==
                                        session_id;
                               }),
                faults_.end());
  failing_allocations_.erase(session_id);
  UpdateActive();
}

std::vector<FaultInjector::Firing> FaultInjector::Evaluate(
    const CommandFacts& facts) const {
  std::vector<Firing> firings;
  absl::ReaderMutexLock lock(&mutex_);
  for (const auto& fault : faults_) {
    std::optional<uint64_t> match = fault->trigger.Evaluate(facts);
    if (match.has_value()) firings.push_back({fault, *match});
  }
  return firings;
}

proto::FaultRecord FaultInjector::NewRecord(const Firing& firing,
                                            const CommandFacts& facts) const {
  proto::FaultRecord record;
  record.set_fault_id(firing.fault->id);
  record.set_fault_name(firing.fault->name);
  record.set_model(firing.fault->model);
  record.set_pid(facts.pid);
  record.set_session_id(facts.session_id);
  record.set_device(facts.device);
  record.set_stream(facts.stream);
  record.set_command(facts.overload.empty()
                         ? std::string(facts.name)
                         : absl::StrCat(facts.name, ".", facts.overload));
  record.set_phase(std::string(faults::PhaseName(facts.phase)));
  record.set_output(-1);
  record.set_input(-1);
  record.set_element(-1);
  record.set_match(firing.match);
  record.set_sequence(facts.sequence);
  return record;
}

thread_local std::vector<FaultInjector::Firing> FaultInjector::after_command_;

absl::Status FaultInjector::BeforeCommand(const StreamContext& context,
                                          const proto::Command& command,
                                          bool* run_after) {
  after_command_.clear();
  const std::string name =
      command.has_launch() ? std::string() : CommandName(command);
  const CommandFacts facts = FactsOf(context, command, name);
  if (profile_commands_) profile_.Count(facts);
  for (const Firing& firing : Evaluate(facts)) {
    absl::Status status = FireBefore(firing, facts, &context, *context.session,
                                     &command, &after_command_);
    if (!status.ok()) {
      after_command_.clear();
      return status;
    }
  }
  *run_after = !after_command_.empty();
  return absl::OkStatus();
}

absl::Status FaultInjector::BeforeAllocate(Session& session, int device,
                                           uint64_t size) {
  {
    absl::MutexLock lock(&mutex_);
    auto failing = failing_allocations_.find(session.id());
    if (failing != failing_allocations_.end()) {
      FailingAllocation& retry = failing->second;
      if (retry.device == device && retry.size == size &&
          retry.retries_left > 0) {
        --retry.retries_left;
        return retry.error;
      }
      failing_allocations_.erase(failing);
    }
  }
  CommandFacts facts;
  facts.session_id = session.id();
  facts.pid = session.pid();
  facts.device = device;
  facts.kind = faults::kAllocationKind;
  facts.name = "allocation";
  if (profile_commands_) profile_.Count(facts);
  std::vector<Firing> unused_after;
  for (const Firing& firing : Evaluate(facts)) {
    absl::Status status =
        FireBefore(firing, facts, /*context=*/nullptr, session,
                   /*command=*/nullptr, &unused_after);
    if (!status.ok()) {
      if (ErrorCodeOf(status) == proto::OUT_OF_MEMORY) {
        absl::MutexLock lock(&mutex_);
        failing_allocations_[session.id()] =
            FailingAllocation{device, size, kAllocationRetries, status};
      }
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status FaultInjector::FireBefore(const Firing& firing,
                                       const CommandFacts& facts,
                                       const StreamContext* context,
                                       Session& session,
                                       const proto::Command* command,
                                       std::vector<Firing>* after) {
  const ArmedFault& fault = *firing.fault;
  const std::string what = fault.Describe();
  proto::FaultRecord record = NewRecord(firing, facts);
  auto logged = [&](std::string message) {
    record.set_message(std::move(message));
    Log(LogLevel::kInfo, what, ": ", record.message());
    log_.Append(record);
  };
  switch (fault.spec.model_case()) {
    case proto::FaultSpec::kCorruptOutput:
    case proto::FaultSpec::kCorruptCopy:
    case proto::FaultSpec::kStuckAt:
      after->push_back(firing);
      return absl::OkStatus();
    case proto::FaultSpec::kCorruptMemory:
      CorruptMemoryAtRest(firing, facts, session);
      return absl::OkStatus();
    case proto::FaultSpec::kCorruptInput:
      if (command != nullptr && command->has_launch()) {
        CorruptTensors(firing, facts, session, TensorArguments(*command),
                       /*inputs=*/true);
      }
      return absl::OkStatus();
    case proto::FaultSpec::kKernelFailure: {
      const std::string message = absl::StrCat(
          what, ": launch failure of ", Where(facts),
          " (like cudaErrorLaunchFailure)",
          fault.spec.kernel_failure().message().empty() ? "" : ": ",
          fault.spec.kernel_failure().message());
      logged(message);
      return KernelFailureError(message);
    }
    case proto::FaultSpec::kCopyFailure: {
      const std::string message =
          absl::StrCat(what, ": ", Where(facts), " failed",
                       fault.spec.copy_failure().message().empty() ? "" : ": ",
                       fault.spec.copy_failure().message());
      logged(message);
      return MakeError(proto::COPY_FAILURE, message);
    }
    case proto::FaultSpec::kAllocationFailure: {
      const std::string message = absl::StrCat(
          what, ": ", Where(facts),
          " failed (an injected out-of-memory, like "
          "cudaErrorMemoryAllocation)",
          fault.spec.allocation_failure().message().empty() ? "" : ": ",
          fault.spec.allocation_failure().message());
      logged(message);
      return MakeError(proto::OUT_OF_MEMORY, message);
    }
    case proto::FaultSpec::kSticky: {
      const bool ecc = fault.spec.sticky().error() == "ecc_uncorrectable";
      const std::string message = absl::StrCat(
          what, ": ",
          ecc ? "an uncorrectable ECC error was detected"
              : "an illegal memory access was encountered",
          " by ", Where(facts), " (like ",
          ecc ? "cudaErrorECCUncorrectable" : "cudaErrorIllegalAddress",
          "). The session is unusable: every later call fails with this "
          "error until the process exits");
      logged(message);
      absl::Status error = MakeError(
          ecc ? proto::ECC_UNCORRECTABLE : proto::ILLEGAL_ADDRESS, message);
      session.MakeSticky(error);
      return error;
    }
    case proto::FaultSpec::kDeviceFault:
    case proto::FaultSpec::kDeviceLost: {
      const bool lost = fault.spec.has_device_lost();
      logged(
          absl::StrCat("openreg:", facts.device,
                       lost ? " fell off the bus" : " entered the FAULT state",
                       " at ", Where(facts)));
      DeviceHealth& health = devices_->health(facts.device);
      health.Enter(lost ? DeviceState::kLost : DeviceState::kFault,
                   absl::StrCat(what, " at ", Where(facts)));
      return health.Check();
    }
    case proto::FaultSpec::kDaemonAbort:
      logged(absl::StrCat("aborting the daemon at ", Where(facts)));
      Log(LogLevel::kError, what, ": aborting the daemon at ", Where(facts));
      std::abort();
    case proto::FaultSpec::kDisconnect: {
      logged(absl::StrCat("dropping session ", facts.session_id, " at ",
                          Where(facts)));
      std::function<void(uint64_t)> disconnect;
      {
        absl::MutexLock lock(&mutex_);
        disconnect = disconnect_;
      }
      if (disconnect) disconnect(facts.session_id);
      return MakeError(proto::DEVICE_LOST,
                       absl::StrCat(what, ": the daemon dropped this session"));
    }
    case proto::FaultSpec::kHang: {
      const double seconds = fault.spec.hang().seconds();
      logged(absl::StrCat(
          Where(facts), " hangs ",
          seconds == 0 ? "forever" : absl::StrCat("for ", seconds, " s")));
      SleepUnlessStopped(context, seconds == 0 ? absl::InfiniteDuration()
                                               : absl::Seconds(seconds));
      return absl::OkStatus();
    }
    case proto::FaultSpec::kSlow: {
      const proto::Slow& slow = fault.spec.slow();
      logged(absl::StrCat(Where(facts), " slowed (delay ", slow.delay_seconds(),
                          " s, factor ", slow.factor(), ")"));
      if (slow.delay_seconds() > 0) {
        SleepUnlessStopped(context, absl::Seconds(slow.delay_seconds()));
      }
      if (slow.factor() > 1) after->push_back(firing);
      return absl::OkStatus();
    }
    case proto::FaultSpec::kCorrectedError:
      logged(absl::StrCat("corrected a single-bit error at ", Where(facts)));
      return absl::OkStatus();
    case proto::FaultSpec::MODEL_NOT_SET:
      break;
  }
  return absl::OkStatus();
}

void FaultInjector::AfterCommand(const StreamContext& context,
                                 const proto::Command& command,
                                 const WrittenTensors& written,
                                 absl::Duration ran_for, absl::Status* result) {
  if (after_command_.empty()) return;
  const std::vector<Firing> firings = std::move(after_command_);
  after_command_.clear();
  const std::string name =
      command.has_launch() ? std::string() : CommandName(command);
  CommandFacts facts = FactsOf(context, command, name);
  facts.written_tensors = static_cast<int>(written.size());
  for (const Firing& firing : firings) {
    const proto::FaultSpec& spec = firing.fault->spec;
    if (spec.has_slow()) {
      SleepUnlessStopped(&context, ran_for * (spec.slow().factor() - 1));
      continue;
    }
    // A command that failed wrote nothing worth corrupting.
    if (!result->ok()) continue;
    if (spec.has_corrupt_copy()) {
      CorruptCopyDestination(firing, facts, *context.session, command);
    } else if (spec.has_stuck_at() && spec.stuck_at().bytes() != 0) {
      EnforceStuckRange(firing, facts);
    } else {
      CorruptTensors(firing, facts, *context.session, written,
                     /*inputs=*/false);
    }
  }
}

void FaultInjector::CorruptTensors(const Firing& firing,
                                   const CommandFacts& facts, Session& session,
                                   const WrittenTensors& tensors, bool inputs) {
  const ArmedFault& fault = *firing.fault;
  proto::FaultRecord record = NewRecord(firing, facts);
  const bool stuck = fault.spec.has_stuck_at();
  const proto::Corruption& corruption =
      inputs ? fault.spec.corrupt_input() : fault.spec.corrupt_output();
  const char* role = inputs ? "input" : "output";
  if (tensors.empty()) {
    record.set_message(absl::StrCat("nothing to corrupt: the command has no ",
                                    role, " tensor"));
    log_.Append(std::move(record));
    return;
  }
  std::mt19937_64 rng = FiringRng(fault.spec.seed(), firing.match, 1);
  const proto::Trigger& trigger = fault.spec.trigger();
  int index;
  if (!stuck && (inputs ? corruption.has_input() : corruption.has_output())) {
    index = static_cast<int>(inputs ? corruption.input() : corruption.output());
  } else if (inputs ? trigger.has_input() : trigger.has_output()) {
    index = static_cast<int>(inputs ? trigger.input() : trigger.output());
  } else {
    index = static_cast<int>(
        std::uniform_int_distribution<size_t>(0, tensors.size() - 1)(rng));
  }
  if (index >= static_cast<int>(tensors.size())) {
    record.set_message(absl::StrCat("nothing to corrupt: the command has ",
                                    tensors.size(), " ", role, " tensors, no ",
                                    role, " ", index));
    log_.Append(std::move(record));
    return;
  }
  const proto::TensorRef& tensor = tensors[index];
  const int64_t count = ElementCount(tensor);
  const int width = static_cast<int>(DtypeElementSize(tensor.dtype()));
  if (inputs) {
    record.set_input(index);
  } else {
    record.set_output(index);
  }
  record.set_dtype(DtypeName(tensor.dtype()));
  if (count == 0 || width == 0) {
    record.set_message(
        absl::StrCat("nothing to corrupt: the ", role, " is empty"));
    log_.Append(std::move(record));
    return;
  }
  const std::optional<int64_t> explicit_element =
      stuck ? (fault.spec.stuck_at().has_element()
                   ? std::optional<int64_t>(fault.spec.stuck_at().element())
                   : std::optional<int64_t>(0))
            : (corruption.has_element()
                   ? std::optional<int64_t>(corruption.element())
                   : std::nullopt);
  const int64_t first =
      explicit_element.has_value()
          ? *explicit_element
          : std::uniform_int_distribution<int64_t>(0, count - 1)(rng);
  if (first >= count) {
    record.set_message(absl::StrCat("nothing to corrupt: element ", first,
                                    " is beyond the ", role, "'s ", count,
                                    " elements"));
    log_.Append(std::move(record));
    return;
  }
  const int64_t elements =
      stuck ? 1
            : std::min<int64_t>(std::max(corruption.elements(), 1u),
                                count - first);
  bool changed = false;
  for (int64_t i = 0; i < elements; ++i) {
    const std::optional<int64_t> offset = ElementOffset(tensor, first + i);
    if (!offset.has_value()) break;
    absl::StatusOr<PinnedRange> pinned = session.PinRange(
        tensor.address() + static_cast<uint64_t>(*offset * width), width);
    if (!pinned.ok()) {
      record.set_message(
          absl::StrCat("could not corrupt: ", pinned.status().message()));
      break;
    }
    const std::string before =
        FormatElement(pinned->data, width, tensor.dtype());
    std::vector<uint32_t> bits;
    if (stuck) {
      const proto::StuckAt& stuck_at = fault.spec.stuck_at();
      if (ForceBit(pinned->data, width, stuck_at.bit(), stuck_at.value())) {
        bits.push_back(stuck_at.bit());
      }
    } else {
      bits = CorruptElement(pinned->data, width, corruption, rng);
    }
    const std::string value_after =
        FormatElement(pinned->data, width, tensor.dtype());
    changed = changed || value_after != before;
    if (i == 0) {
      record.set_element(first);
      for (uint32_t bit : bits) record.add_bits(bit);
      record.set_value_before(before);
      record.set_value_after(value_after);
    }
  }
  // A stuck bit that already had its value changed nothing: not logged.
  if (stuck && !changed) return;
  if (record.message().empty()) {
    record.set_message(absl::StrCat(
        stuck ? "stuck bit forced in " : "corrupted ", elements,
        " element(s) of ", role, " ", index, " of ", record.command()));
  }
  log_.Append(std::move(record));
}

void FaultInjector::CorruptCopyDestination(const Firing& firing,
                                           const CommandFacts& facts,
                                           Session& session,
                                           const proto::Command& command) {
  const ArmedFault& fault = *firing.fault;
  proto::FaultRecord record = NewRecord(firing, facts);
  record.set_dtype("bytes");
  // The destination: device memory, or the host side of a device-to-host
  // copy (staging or a pinned region; both are memory the client reads).
  absl::StatusOr<PinnedRange> device_range;
  PinnedHostRange host_range;
  char* data = nullptr;
  uint64_t size = 0;
  switch (command.body_case()) {
    case proto::Command::kH2D:
      size = command.h2d().size();
      device_range = session.PinRange(command.h2d().dst(), size);
      break;
    case proto::Command::kD2D:
      size = command.d2d().size();
      device_range = session.PinRange(command.d2d().dst(), size);
      break;
    case proto::Command::kMemset:
      size = command.memset().size();
      device_range = session.PinRange(command.memset().dst(), size);
      break;
    case proto::Command::kD2H: {
      const proto::CopyDeviceToHost& copy = command.d2h();
      size = copy.size();
      if (copy.has_host()) {
        absl::StatusOr<PinnedHostRange> host = session.PinHostRange(
            copy.host().region(), copy.host().offset(), size);
        if (host.ok()) {
          host_range = *std::move(host);
          data = host_range.data;
        }
      } else if (copy.staging_offset() <= session.limits().staging_bytes &&
                 size <=
                     session.limits().staging_bytes - copy.staging_offset()) {
        data = session.staging() + copy.staging_offset();
      }
      break;
    }
    default:
      break;
  }
  if (device_range.ok() && data == nullptr) data = device_range->data;
  if (data == nullptr || size == 0) {
    record.set_message("nothing to corrupt: the copy has no destination bytes");
    log_.Append(std::move(record));
    return;
  }
  const proto::Corruption& corruption = fault.spec.corrupt_copy();
  std::mt19937_64 rng = FiringRng(fault.spec.seed(), firing.match, 1);
  const uint64_t words = (size + kMemoryWordBytes - 1) / kMemoryWordBytes;
  const uint64_t word =
      corruption.has_element()
          ? static_cast<uint64_t>(corruption.element()) / kMemoryWordBytes
          : std::uniform_int_distribution<uint64_t>(0, words - 1)(rng);
  if (word >= words) {
    record.set_message(absl::StrCat("nothing to corrupt: byte ",
                                    corruption.element(), " is beyond the ",
                                    size, "-byte copy"));
    log_.Append(std::move(record));
    return;
  }
  const uint64_t offset = word * kMemoryWordBytes;
  const int width =
      static_cast<int>(std::min<uint64_t>(kMemoryWordBytes, size - offset));
  record.set_element(static_cast<int64_t>(offset));
  record.set_value_before(FormatElement(data + offset, width, -1));
  for (uint32_t bit : CorruptElement(data + offset, width, corruption, rng)) {
    record.add_bits(bit);
  }
  record.set_value_after(FormatElement(data + offset, width, -1));
  record.set_message(absl::StrCat("corrupted the ", width,
                                  "-byte word at byte ", offset, " of a ", size,
                                  "-byte ", record.command()));
  log_.Append(std::move(record));
}

void FaultInjector::CorruptMemoryAtRest(const Firing& firing,
                                        const CommandFacts& facts,
                                        Session& session) {
  const ArmedFault& fault = *firing.fault;
  proto::FaultRecord record = NewRecord(firing, facts);
  record.set_dtype("bytes");
  std::vector<std::shared_ptr<DeviceBuffer>> buffers;
  for (std::shared_ptr<DeviceBuffer>& buffer : session.Allocations()) {
    if (buffer->device() == facts.device && !buffer->lost() &&
        buffer->size() > 0) {
      buffers.push_back(std::move(buffer));
    }
  }
  if (buffers.empty()) {
    record.set_message(
        absl::StrCat("nothing to corrupt: the session holds no "
                     "memory on openreg:",
                     facts.device));
    log_.Append(std::move(record));
    return;
  }
  const proto::Corruption& corruption = fault.spec.corrupt_memory();
  std::mt19937_64 rng = FiringRng(fault.spec.seed(), firing.match, 1);
  const DeviceBuffer& buffer = *buffers[std::uniform_int_distribution<size_t>(
      0, buffers.size() - 1)(rng)];
  const uint64_t words =
      (buffer.size() + kMemoryWordBytes - 1) / kMemoryWordBytes;
  const uint64_t word =
      corruption.has_element()
          ? static_cast<uint64_t>(corruption.element()) / kMemoryWordBytes
          : std::uniform_int_distribution<uint64_t>(0, words - 1)(rng);
  if (word >= words) {
    record.set_message(absl::StrCat("nothing to corrupt: byte ",
                                    corruption.element(),
                                    " is beyond the chosen allocation"));
    log_.Append(std::move(record));
    return;
  }
  const uint64_t offset = word * kMemoryWordBytes;
  const int width = static_cast<int>(
      std::min<uint64_t>(kMemoryWordBytes, buffer.size() - offset));
  char* data = buffer.data() + offset;
  record.set_element(static_cast<int64_t>(offset));
  record.set_value_before(FormatElement(data, width, -1));
  for (uint32_t bit : CorruptElement(data, width, corruption, rng)) {
    record.add_bits(bit);
  }
  record.set_value_after(FormatElement(data, width, -1));
  record.set_message(absl::StrCat(
      "corrupted memory at rest: the ", width, "-byte word at ",
      absl::StrFormat("0x%x", buffer.address() + offset), " (byte ", offset,
      " of a ", buffer.size(), "-byte allocation)"));
  log_.Append(std::move(record));
}

void FaultInjector::EnforceStuckRange(const Firing& firing,
                                      const CommandFacts& facts) {
  const proto::StuckAt& stuck = firing.fault->spec.stuck_at();
  const int device = DeviceOfAddress(stuck.address());
  if (!IsDeviceAddress(stuck.address()) || !devices_->IsValid(device)) return;
  absl::StatusOr<char*> range =
      devices_->arena(device).HostPointer(stuck.address(), stuck.bytes());
  if (!range.ok()) return;
  const int word_bytes =
      stuck.word_bytes() == 0 ? 4 : static_cast<int>(stuck.word_bytes());
  uint64_t changed = 0;
  int64_t first_changed = -1;
  for (uint64_t offset = 0; offset + word_bytes <= stuck.bytes();
       offset += word_bytes) {
    char* word = *range + offset;
    const char before = word[stuck.bit() / 8];
    ForceBit(word, word_bytes, stuck.bit(), stuck.value());
    if (word[stuck.bit() / 8] != before) {
      ++changed;
      if (first_changed < 0) first_changed = static_cast<int64_t>(offset);
    }
  }
  if (changed == 0) return;
  proto::FaultRecord record = NewRecord(firing, facts);
  record.set_dtype("bytes");
  record.set_element(first_changed);
  record.add_bits(stuck.bit());
  record.set_message(absl::StrCat(
      "stuck bit ", stuck.bit(), " = ", stuck.value(), " changed ", changed,
      " word(s) in [", absl::StrFormat("0x%x", stuck.address()), ", +",
      stuck.bytes(), ") after ", record.command()));
  log_.Append(std::move(record));
}

}  // namespace openreg::daemon
