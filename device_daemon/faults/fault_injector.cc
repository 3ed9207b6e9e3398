#include "device_daemon/faults/fault_injector.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/fault_plan.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"
#include "device_daemon/devices/blocking_region.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/faults/memory_corruption.h"
#include "device_daemon/faults/tensor_corruption.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {

namespace {

constexpr int kAllocationRetries = 5;
// Sleeps of hung and slowed commands are cut into slices so that session
// teardown is noticed.
constexpr absl::Duration kSleepSlice = absl::Milliseconds(20);

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
  active_.store(profile_commands_ || !registry_.empty(),
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
  absl::MutexLock lock(&mutex_);
  std::vector<uint32_t> ids =
      registry_.Arm(plan, session != nullptr ? session->id() : 0);
  UpdateActive();
  return ids;
}

absl::StatusOr<uint32_t> FaultInjector::Disarm(const std::vector<uint32_t>& ids,
                                               uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  absl::StatusOr<uint32_t> disarmed = registry_.Disarm(ids, session_id);
  UpdateActive();
  return disarmed;
}

void FaultInjector::SessionClosed(uint64_t session_id) {
  absl::MutexLock lock(&mutex_);
  registry_.ForgetSession(session_id);
  failing_allocations_.erase(session_id);
  UpdateActive();
}

thread_local std::vector<Firing> FaultInjector::after_command_;

CommandFacts FaultInjector::Facts(const StreamContext& context,
                                  const proto::Command& command,
                                  const std::string& name,
                                  CollectiveView* view) const {
  CommandFacts facts = FactsOfCommand(context, command, name);
  if (!command.has_collective() || collectives_ == nullptr) return facts;
  // A collective the engine refuses (unknown communicator, bad shape)
  // keeps no group or rank: Run reports why.
  absl::StatusOr<CollectiveView> seen =
      collectives_->View(context, command.collective());
  if (!seen.ok()) return facts;
  facts.group = seen->group;
  facts.group_desc = seen->group_desc;
  facts.rank = seen->rank;
  facts.tensor_arguments = static_cast<int>(seen->contribution.size());
  facts.written_tensors = static_cast<int>(seen->delivered.size());
  if (view != nullptr) *view = *std::move(seen);
  return facts;
}

absl::Status FaultInjector::BeforeCommand(const StreamContext& context,
                                          const proto::Command& command,
                                          bool* run_after) {
  after_command_.clear();
  const std::string name =
      command.has_launch() ? std::string() : CommandName(command);
  CollectiveView view;
  const CommandFacts facts = Facts(context, command, name, &view);
  if (profile_commands_) profile_.Count(facts);
  for (const Firing& firing : registry_.Evaluate(facts)) {
    absl::Status status = FireBefore(firing, facts, &context, *context.session,
                                     &command, &view, &after_command_);
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
  const CommandFacts facts = FactsOfAllocation(session, device);
  if (profile_commands_) profile_.Count(facts);
  std::vector<Firing> unused_after;
  for (const Firing& firing : registry_.Evaluate(facts)) {
    absl::Status status =
        FireBefore(firing, facts, /*context=*/nullptr, session,
                   /*command=*/nullptr, /*view=*/nullptr, &unused_after);
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
                                       const CollectiveView* view,
                                       std::vector<Firing>* after) {
  const ArmedFault& fault = *firing.fault;
  const std::string what = fault.Describe();
  proto::FaultRecord record = NewFaultRecord(firing, facts);
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
      CorruptMemoryAtRest(firing, facts, session, log_);
      return absl::OkStatus();
    case proto::FaultSpec::kCorruptInput:
      if (command != nullptr && command->has_launch()) {
        CorruptTensors(firing, facts, session, TensorArguments(*command),
                       /*inputs=*/true, log_);
      } else if (command != nullptr && command->has_collective() &&
                 view != nullptr) {
        // The rank's contribution, in its memory, before the collective
        // reads it (as a kernel's input is).
        CorruptTensors(firing, facts, session, view->contribution,
                       /*inputs=*/true, log_);
      }
      return absl::OkStatus();
    case proto::FaultSpec::kKernelFailure: {
      const std::string message = absl::StrCat(
          what, ": launch failure of ", WhereFired(facts),
          " (like cudaErrorLaunchFailure)",
          fault.spec.kernel_failure().message().empty() ? "" : ": ",
          fault.spec.kernel_failure().message());
      logged(message);
      return KernelFailureError(message);
    }
    case proto::FaultSpec::kCopyFailure: {
      const std::string message =
          absl::StrCat(what, ": ", WhereFired(facts), " failed",
                       fault.spec.copy_failure().message().empty() ? "" : ": ",
                       fault.spec.copy_failure().message());
      logged(message);
      return MakeError(proto::COPY_FAILURE, message);
    }
    case proto::FaultSpec::kAllocationFailure: {
      const std::string message = absl::StrCat(
          what, ": ", WhereFired(facts),
          " failed (an injected out-of-memory, like "
          "cudaErrorMemoryAllocation)",
          fault.spec.allocation_failure().message().empty() ? "" : ": ",
          fault.spec.allocation_failure().message());
      logged(message);
      return MakeError(proto::OUT_OF_MEMORY, message);
    }
    case proto::FaultSpec::kSticky: {
      const bool ecc = fault.spec.sticky().error() == proto::ECC_UNCORRECTABLE;
      const std::string message = absl::StrCat(
          what, ": ",
          ecc ? "an uncorrectable ECC error was detected"
              : "an illegal memory access was encountered",
          " by ", WhereFired(facts), " (like ",
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
                       " at ", WhereFired(facts)));
      DeviceHealth& health = devices_->health(facts.device);
      health.Enter(lost ? DeviceState::kLost : DeviceState::kFault,
                   absl::StrCat(what, " at ", WhereFired(facts)));
      return health.Check();
    }
    case proto::FaultSpec::kDaemonAbort:
      logged(absl::StrCat("aborting the daemon at ", WhereFired(facts)));
      Log(LogLevel::kError, what, ": aborting the daemon at ",
          WhereFired(facts));
      std::abort();
    case proto::FaultSpec::kDisconnect: {
      logged(absl::StrCat("dropping session ", facts.session_id, " at ",
                          WhereFired(facts)));
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
          WhereFired(facts), " hangs ",
          seconds == 0 ? "forever" : absl::StrCat("for ", seconds, " s")));
      SleepUnlessStopped(context, seconds == 0 ? absl::InfiniteDuration()
                                               : absl::Seconds(seconds));
      return absl::OkStatus();
    }
    case proto::FaultSpec::kSlow: {
      const proto::Slow& slow = fault.spec.slow();
      logged(absl::StrCat(WhereFired(facts), " slowed (delay ",
                          slow.delay_seconds(), " s, factor ", slow.factor(),
                          ")"));
      if (slow.delay_seconds() > 0) {
        SleepUnlessStopped(context, absl::Seconds(slow.delay_seconds()));
      }
      if (slow.factor() > 1) after->push_back(firing);
      return absl::OkStatus();
    }
    case proto::FaultSpec::kCorrectedError:
      logged(
          absl::StrCat("corrected a single-bit error at ", WhereFired(facts)));
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
  CollectiveView view;
  CommandFacts facts = Facts(context, command, name, &view);
  // What a collective delivered to this rank is its output.
  const WrittenTensors& outputs =
      command.has_collective() ? view.delivered : written;
  facts.written_tensors = static_cast<int>(outputs.size());
  for (const Firing& firing : firings) {
    const proto::FaultSpec& spec = firing.fault->spec;
    if (spec.has_slow()) {
      SleepUnlessStopped(&context, ran_for * (spec.slow().factor() - 1));
      continue;
    }
    // A command that failed wrote nothing worth corrupting.
    if (!result->ok()) continue;
    if (spec.has_corrupt_copy()) {
      CorruptCopyDestination(firing, facts, *context.session, command, log_);
    } else if (spec.has_stuck_at() && spec.stuck_at().bytes() != 0) {
      EnforceStuckRange(firing, facts, *devices_, log_);
    } else {
      CorruptTensors(firing, facts, *context.session, outputs,
                     /*inputs=*/false, log_);
    }
  }
}

}  // namespace openreg::daemon
