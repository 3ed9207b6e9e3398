#include "device_daemon/execution/command_executor.h"

#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "data_plane/fault_plan.h"
#include "data_plane/module_abi.h"
#include "data_plane/monotonic_clock.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/devices/blocking_region.h"
#include "device_daemon/execution/module_crash_guard.h"
#include "device_daemon/execution/stream_worker.h"
#include "device_daemon/ipc/ipc_event_wait.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {
namespace {

// Long waits are cut into slices of this length so that teardown is
// noticed promptly.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

// The staging area is client-writable memory inside the segment; only its
// bounds need checking.
absl::StatusOr<char*> StagingRange(const Session& session, uint64_t offset,
                                   uint64_t size) {
  const uint64_t staging_bytes = session.limits().staging_bytes;
  if (offset > staging_bytes || size > staging_bytes - offset) {
    return InvalidValueError(
        absl::StrCat("staging range [", offset, ", ", offset, " + ", size,
                     ") is outside the ", staging_bytes, "-byte staging area"));
  }
  return session.staging() + offset;
}

// The host side of a copy: a pinned region the client registered (kept
// mapped through `pinned` while the copy runs), or else staging.
absl::StatusOr<char*> HostSide(const Session& session,
                               const proto::HostRange* host,
                               uint64_t staging_offset, uint64_t size,
                               PinnedHostRange* pinned) {
  if (host == nullptr) return StagingRange(session, staging_offset, size);
  absl::StatusOr<PinnedHostRange> range =
      session.PinHostRange(host->region(), host->offset(), size);
  if (!range.ok()) return range.status();
  *pinned = *std::move(range);
  return pinned->data;
}

}  // namespace

std::string CommandName(const proto::Command& command) {
  switch (command.body_case()) {
    case proto::Command::kLaunch: {
      const proto::LaunchOp& launch = command.launch();
      return launch.overload().empty()
                 ? launch.name()
                 : absl::StrCat(launch.name(), ".", launch.overload());
    }
    case proto::Command::kH2D:
      return "copy_host_to_device";
    case proto::Command::kD2H:
      return "copy_device_to_host";
    case proto::Command::kD2D:
      return "copy_device_to_device";
    case proto::Command::kMemset:
      return "memset";
    case proto::Command::kRecordEvent:
      return "record_event";
    case proto::Command::kWaitStream:
      return "wait_stream";
    case proto::Command::kWaitIpcEvent:
      return "wait_ipc_event";
    case proto::Command::kFree:
      return "free";
    case proto::Command::kCollective:
      return faults::CollectiveOpName(command.collective().kind());
    case proto::Command::kReplayGraph:
      return "graph_replay";
    case proto::Command::kLaunchModule:
      return command.launch_module().kernel();
    case proto::Command::BODY_NOT_SET:
      break;
  }
  return "command";
}

CommandExecutor::CommandExecutor(Devices* devices, OpRunner* op_runner)
    : devices_(devices),
      op_runner_(op_runner),
      fault_hook_(&no_faults_),
      costs_(devices) {}

void CommandExecutor::SetFaultHook(FaultHook* hook) {
  fault_hook_.store(hook != nullptr ? hook : &no_faults_,
                    std::memory_order_release);
}

void CommandExecutor::SetCollectiveRunner(CollectiveRunner* runner) {
  collective_runner_.store(runner, std::memory_order_release);
}

void CommandExecutor::SetGraphStore(GraphStore* store) {
  graph_store_.store(store, std::memory_order_release);
}

absl::Status CommandExecutor::Execute(const StreamContext& context,
                                      const proto::Command& command) {
  absl::Status status = ExecuteChecked(context, command);
  if (!status.ok() && command.has_collective()) {
    // Whatever failed it (the collective, an injected fault, a sticky
    // error, the device's state), work queued behind a collective that did
    // not run must not run on as if it had.
    context.session->TaintStream(context.slot_index, command.sequence(),
                                 command.collective().communicator(), status);
  }
  return status;
}

absl::Status CommandExecutor::ExecuteChecked(const StreamContext& context,
                                             const proto::Command& command) {
  if (absl::Status sticky = context.session->StickyError(); !sticky.ok()) {
    return sticky;
  }
  const DeviceHealth& health = devices_->health(context.device);
  if (!health.usable()) return health.Check();
  FaultHook* hook = fault_hook_.load(std::memory_order_acquire);
  if (!hook->active()) return Dispatch(context, command, nullptr);
  bool run_after = false;
  StageTimer before(context.timing, CostStage::kHook);
  absl::Status status = hook->BeforeCommand(context, command, &run_after);
  before.Stop();
  if (!status.ok()) return status;
  if (!run_after) return Dispatch(context, command, nullptr);
  WrittenTensors written;
  const absl::Time started = absl::Now();
  status = Dispatch(context, command, &written);
  const StageTimer after(context.timing, CostStage::kHook);
  hook->AfterCommand(context, command, written, absl::Now() - started, &status);
  return status;
}

std::shared_ptr<RunningStream> CommandExecutor::StartStream(Session* session,
                                                            uint32_t slot,
                                                            int device) {
  return StreamWorker::Start(session, slot, device, this);
}

absl::Status CommandExecutor::AdmitAllocation(Session& session, int device,
                                              uint64_t size) {
  const DeviceHealth& health = devices_->health(device);
  if (!health.usable()) return health.Check();
  FaultHook* hook = fault_hook_.load(std::memory_order_acquire);
  if (!hook->active()) return absl::OkStatus();
  return hook->BeforeAllocate(session, device, size);
}

void CommandExecutor::SessionClosed(uint64_t session_id) {
  fault_hook_.load(std::memory_order_acquire)->SessionClosed(session_id);
  if (CollectiveRunner* runner =
          collective_runner_.load(std::memory_order_acquire)) {
    runner->SessionClosed(session_id);
  }
  if (GraphStore* store = graph_store_.load(std::memory_order_acquire)) {
    store->SessionClosed(session_id);
  }
}

absl::Status CommandExecutor::Dispatch(const StreamContext& context,
                                       const proto::Command& command,
                                       WrittenTensors* written) {
  // A launch's op runner times its own stages, a compiled kernel's launch
  // and a replay's commands theirs; everything else is one.
  const StageTimer body(command.has_launch() || command.has_replay_graph() ||
                                command.has_launch_module()
                            ? nullptr
                            : context.timing,
                        CostStage::kKernel);
  switch (command.body_case()) {
    case proto::Command::kLaunch:
      return Launch(context, command.launch(), command.sequence(), written);
    case proto::Command::kH2D:
      return CopyHostToDevice(context, command.h2d());
    case proto::Command::kD2H:
      return CopyDeviceToHost(context, command.d2h());
    case proto::Command::kD2D:
      return CopyDeviceToDevice(context, command.d2d());
    case proto::Command::kMemset:
      return Memset(context, command.memset());
    case proto::Command::kRecordEvent:
      return RecordEvent(context, command.record_event(), command.sequence());
    case proto::Command::kWaitStream: {
      absl::Status waited =
          WaitStream(context, command.wait_stream(), command.sequence());
      if (!waited.ok()) return waited;
      // Work that waits for a failed collective inherits its failure (a
      // free's fences do not: the memory is released either way).
      return context.session->taints().Check(
          command.wait_stream().stream_slot(),
          command.wait_stream().sequence());
    }
    case proto::Command::kWaitIpcEvent:
      return WaitIpcEvent(context, command.wait_ipc_event());
    case proto::Command::kCollective:
      return RunCollective(context, command.collective());
    case proto::Command::kFree:
      return FreeMemory(context, command.free(), command.sequence());
    case proto::Command::kReplayGraph:
      return ReplayGraph(context, command.replay_graph());
    case proto::Command::kLaunchModule:
      return LaunchModuleKernel(context, command.launch_module(), written);
    case proto::Command::BODY_NOT_SET:
      break;
  }
  return InvalidValueError("command has no body (unknown command type?)");
}

absl::Status CommandExecutor::CopyHostToDevice(
    const StreamContext& context, const proto::CopyHostToDevice& copy) {
  const Session& session = *context.session;
  PinnedHostRange pinned_source;
  absl::StatusOr<char*> source =
      HostSide(session, copy.has_host() ? &copy.host() : nullptr,
               copy.staging_offset(), copy.size(), &pinned_source);
  if (!source.ok()) return source.status();
  absl::StatusOr<PinnedRange> destination =
      session.PinRange(copy.dst(), copy.size());
  if (!destination.ok()) return destination.status();
  if (copy.size() != 0) std::memcpy(destination->data, *source, copy.size());
  DeviceCounters& counters = devices_->counters(context.device);
  counters.copies_executed.fetch_add(1, std::memory_order_relaxed);
  counters.host_to_device_bytes.fetch_add(copy.size(),
                                          std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status CommandExecutor::CopyDeviceToHost(
    const StreamContext& context, const proto::CopyDeviceToHost& copy) {
  const Session& session = *context.session;
  absl::StatusOr<PinnedRange> source =
      session.PinRange(copy.src(), copy.size());
  if (!source.ok()) return source.status();
  PinnedHostRange pinned_destination;
  absl::StatusOr<char*> destination =
      HostSide(session, copy.has_host() ? &copy.host() : nullptr,
               copy.staging_offset(), copy.size(), &pinned_destination);
  if (!destination.ok()) return destination.status();
  if (copy.size() != 0) std::memcpy(*destination, source->data, copy.size());
  DeviceCounters& counters = devices_->counters(context.device);
  counters.copies_executed.fetch_add(1, std::memory_order_relaxed);
  counters.device_to_host_bytes.fetch_add(copy.size(),
                                          std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status CommandExecutor::CopyDeviceToDevice(
    const StreamContext& context, const proto::CopyDeviceToDevice& copy) {
  absl::StatusOr<PinnedRange> source =
      context.session->PinRange(copy.src(), copy.size());
  if (!source.ok()) return source.status();
  absl::StatusOr<PinnedRange> destination =
      context.session->PinRange(copy.dst(), copy.size());
  if (!destination.ok()) return destination.status();
  // The ranges may overlap (a shift within one allocation).
  if (copy.size() != 0) {
    std::memmove(destination->data, source->data, copy.size());
  }
  DeviceCounters& counters = devices_->counters(context.device);
  counters.copies_executed.fetch_add(1, std::memory_order_relaxed);
  counters.device_to_device_bytes.fetch_add(copy.size(),
                                            std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status CommandExecutor::Memset(const StreamContext& context,
                                     const proto::Memset& set) {
  absl::StatusOr<PinnedRange> destination =
      context.session->PinRange(set.dst(), set.size());
  if (!destination.ok()) return destination.status();
  if (set.size() != 0) {
    std::memset(destination->data, static_cast<unsigned char>(set.value()),
                set.size());
  }
  return absl::OkStatus();
}

absl::Status CommandExecutor::RecordEvent(const StreamContext& context,
                                          const proto::RecordEvent& record,
                                          uint64_t sequence) {
  Session& session = *context.session;
  if (record.event_slot() >= session.limits().max_events ||
      !session.IsEventLive(record.event_slot())) {
    return InvalidHandleError(absl::StrCat("event ", record.event_slot(),
                                           " does not exist in this session"));
  }
  EventSlot* event = session.event_slot(record.event_slot());
  event->stream_slot = context.slot_index;
  event->timestamp_ns.store(static_cast<uint64_t>(MonotonicNanoseconds()),
                            std::memory_order_relaxed);
  // Published last: a reader that sees the sequence sees the timestamp.
  event->recorded_sequence.store(sequence, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status CommandExecutor::WaitStream(const StreamContext& context,
                                         const proto::WaitStream& wait,
                                         uint64_t sequence) {
  Session& session = *context.session;
  const uint32_t target_slot = wait.stream_slot();
  // A session that ends (detach, hang-up, a disconnect fault) stops its
  // streams while one of them may be waiting for another: the client
  // must hear that its session ended, not of a stream gone missing.
  const auto session_ended = [&] {
    return InvalidHandleError(absl::StrCat(
        "this session ended while its stream waited for stream ", target_slot));
  };
  if (target_slot >= session.limits().max_streams ||
      !session.IsStreamAlive(target_slot)) {
    if (session.closed()) return session_ended();
    return InvalidHandleError(absl::StrCat(
        "stream ", target_slot, " is not a live stream of this session"));
  }
  if (target_slot == context.slot_index) {
    // Everything before this command has completed; anything later never
    // would, since this stream is the one waiting.
    if (wait.sequence() >= sequence) {
      return InvalidValueError(absl::StrCat(
          "stream ", target_slot, " cannot wait for its own command ",
          wait.sequence(), " from command ", sequence));
    }
    return absl::OkStatus();
  }
  WaitableCounter& completed = session.stream_slot(target_slot)->completed;
  // Entered only if the wait is real: the device keeps its other streams
  // running meanwhile (the awaited one among them).
  std::optional<WaitBudget::Ticket> ticket;
  std::optional<BlockingRegion> blocking;
  while (completed.Load() < wait.sequence()) {
    if (!blocking.has_value()) {
      absl::StatusOr<WaitBudget::Ticket> admitted =
          wait_budget_.Acquire(session.id());
      if (!admitted.ok()) return admitted.status();
      ticket.emplace(*std::move(admitted));
      blocking.emplace();
    }
    if (context.stop_requested()) {
      return absl::CancelledError("stream stopped while waiting");
    }
    if (!session.IsStreamAlive(target_slot)) {
      if (session.closed()) return session_ended();
      return MakeError(
          proto::INVALID_HANDLE,
          absl::StrCat("stream ", target_slot,
                       " stopped (destroyed or faulted) before completing "
                       "command ",
                       wait.sequence()));
    }
    completed.WaitForAtLeast(wait.sequence(), kWaitSlice,
                             DeviceScheduler::WaitSpin());
  }
  return absl::OkStatus();
}

absl::Status CommandExecutor::WaitIpcEvent(const StreamContext& context,
                                           const proto::WaitIpcEvent& wait) {
  absl::StatusOr<IpcEventSource> source =
      context.session->ImportedEventSource(wait.event_slot());
  if (!source.ok()) return source.status();
  IpcEventPosition position;
  position.stream_slot = wait.stream_slot();
  position.sequence = wait.sequence();
  position.generation = wait.generation();
  std::optional<WaitBudget::Ticket> ticket;
  return AwaitIpcEvent(
      *source, position, absl::InfiniteFuture(),
      [&context] { return context.stop_requested(); },
      [&]() -> absl::Status {
        absl::StatusOr<WaitBudget::Ticket> admitted =
            wait_budget_.Acquire(context.session->id());
        if (!admitted.ok()) return admitted.status();
        ticket.emplace(*std::move(admitted));
        return absl::OkStatus();
      });
}

absl::Status CommandExecutor::RunCollective(
    const StreamContext& context, const proto::Collective& collective) {
  CollectiveRunner* runner = collective_runner_.load(std::memory_order_acquire);
  if (runner == nullptr) {
    return MakeError(proto::INTERNAL,
                     "this daemon runs no collectives (no collective runner)");
  }
  absl::StatusOr<WaitBudget::Ticket> ticket =
      wait_budget_.Acquire(context.session->id());
  if (!ticket.ok()) return ticket.status();
  return runner->Run(context, collective);
}

absl::Status CommandExecutor::ReplayGraph(const StreamContext& context,
                                          const proto::ReplayGraph& replay) {
  GraphStore* store = graph_store_.load(std::memory_order_acquire);
  if (store == nullptr) {
    return MakeError(proto::INTERNAL, "this daemon keeps no graphs");
  }
  absl::StatusOr<std::shared_ptr<const RecordedGraph>> found =
      store->Find(context.session->id(), replay.graph());
  if (!found.ok()) return found.status();
  const RecordedGraph& graph = **found;
  if (graph.device != context.device) {
    return InvalidValueError(absl::StrCat(
        "graph ", graph.id, " was captured on openreg:", graph.device,
        " and cannot be replayed on a stream of openreg:", context.device));
  }
  if (static_cast<uint32_t>(replay.generators_size()) != graph.generators) {
    return InvalidValueError(absl::StrCat("graph ", graph.id, " registered ",
                                          graph.generators,
                                          " generators but its replay passes ",
                                          replay.generators_size(), " draws"));
  }
  // Launches run with what the op runner kept of them at the last replay
  // (their decoded arguments), unless another replay of this graph holds
  // it now.
  RecordedGraph::ReplayCache& cache = *graph.replay_cache;
  const bool keeps = cache.mutex.TryLock();
  const absl::Cleanup unlock = [&cache, keeps] {
    if (keeps) cache.mutex.Unlock();
  };
  if (keeps) cache.launches.resize(graph.commands.size());
  StreamContext step = context;
  // The one copy a replay makes: of the few commands that draw random
  // numbers, with this replay's draws.
  proto::Command with_draws;
  // With the cost profile on, each recorded command is also counted on its
  // own: its stages are what the replay's timing gained meanwhile.
  const bool counted =
      context.timing != nullptr && context.timing->enabled && costs_.enabled();
  for (size_t index = 0; index < graph.commands.size(); ++index) {
    const proto::Command* recorded = &graph.commands[index];
    step.prepared_launch = nullptr;
    if (graph.draws_generators[index]) {
      with_draws = *recorded;
      absl::Status resolved = ResolveGraphDraws(replay, &with_draws);
      if (!resolved.ok()) return resolved;
      recorded = &with_draws;
    } else if (keeps && recorded->has_launch()) {
      step.prepared_launch = &cache.launches[index];
    }
    absl::Status status;
    if (counted) {
      const CommandTiming before = *context.timing;
      status = ExecuteChecked(step, *recorded);
      CommandTiming spent = *context.timing;
      for (int stage = 0; stage < kCostStages; ++stage) {
        spent.nanoseconds[stage] -= before.nanoseconds[stage];
      }
      costs_.RecordReplayed(context.device, CommandName(*recorded), spent);
    } else {
      status = ExecuteChecked(step, *recorded);
    }
    if (!status.ok()) {
      return MakeError(
          ErrorCodeOf(status),
          absl::StrCat(status.message(), " (in the replay of graph ", graph.id,
                       ", at its recorded command ", index + 1, " of ",
                       graph.commands.size(), ", ", CommandName(*recorded),
                       ")"));
    }
  }
  devices_->counters(context.device)
      .graphs_replayed.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status CommandExecutor::FreeMemory(const StreamContext& context,
                                         const proto::FreeMemory& free,
                                         uint64_t sequence) {
  for (const proto::WaitStream& fence : free.fences()) {
    absl::Status waited = WaitStream(context, fence, sequence);
    if (!waited.ok()) return waited;
  }
  return context.session->Free(free.address());
}

absl::Status CommandExecutor::Launch(const StreamContext& context,
                                     const proto::LaunchOp& launch,
                                     uint64_t sequence,
                                     WrittenTensors* written) {
  DeviceCounters& counters = devices_->counters(context.device);
  if (op_runner_ == nullptr) {
    return MakeError(proto::INTERNAL, "this daemon cannot run ops");
  }
  absl::Status status =
      context.prepared_launch != nullptr
          ? op_runner_->RunRepeated(context, launch, sequence, written,
                                    context.prepared_launch)
          : op_runner_->Run(context, launch, sequence, written);
  if (status.ok()) {
    counters.kernels_executed.fetch_add(1);
  } else {
    counters.kernel_failures.fetch_add(1);
  }
  return status;
}

absl::Status CommandExecutor::LaunchModuleKernel(
    const StreamContext& context, const proto::LaunchModuleKernel& launch,
    WrittenTensors* written) {
  const Session& session = *context.session;
  absl::StatusOr<std::shared_ptr<LoadedModule>> module =
      session.FindModule(launch.module());
  if (!module.ok()) return module.status();
  if (launch.arguments_size() > kMaxModuleArguments) {
    return InvalidValueError(absl::StrCat(
        "compiled kernel ", launch.kernel(), " has ", launch.arguments_size(),
        " arguments; at most ", kMaxModuleArguments, " are allowed"));
  }
  // Every tensor is checked whole against the session's allocations and
  // held (pins) while the kernel runs; scalars live in int_values and
  // double_values, which `pointers` points into.
  StageTimer decoding(context.timing, CostStage::kDecode);
  const int count = launch.arguments_size();
  std::vector<PinnedRange> pins;
  pins.reserve(static_cast<size_t>(count));
  std::vector<int64_t> int_values(static_cast<size_t>(count));
  std::vector<double> double_values(static_cast<size_t>(count));
  std::vector<void*> pointers(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    const proto::ModuleArgument& argument = launch.arguments(i);
    const size_t index = static_cast<size_t>(i);
    switch (argument.value_case()) {
      case proto::ModuleArgument::kTensor: {
        if (argument.tensor().device() != context.device) {
          return InvalidValueError(absl::StrCat(
              "compiled kernel ", launch.kernel(), ": argument ", i,
              " is a tensor on openreg:", argument.tensor().device(),
              ", but the kernel runs on openreg:", context.device));
        }
        absl::StatusOr<PinnedRange> pinned =
            session.PinTensor(argument.tensor());
        if (!pinned.ok()) {
          return MakeError(
              ErrorCodeOf(pinned.status()),
              absl::StrCat("compiled kernel ", launch.kernel(), ", argument ",
                           i, ": ", pinned.status().message()));
        }
        pointers[index] = pinned->data;
        pins.push_back(*std::move(pinned));
        if (argument.written() && written != nullptr) {
          written->push_back(argument.tensor());
        }
        break;
      }
      case proto::ModuleArgument::kIntValue:
        int_values[index] = argument.int_value();
        pointers[index] = &int_values[index];
        break;
      case proto::ModuleArgument::kDoubleValue:
        double_values[index] = argument.double_value();
        pointers[index] = &double_values[index];
        break;
      case proto::ModuleArgument::VALUE_NOT_SET:
        return InvalidValueError(absl::StrCat("compiled kernel ",
                                              launch.kernel(), ": argument ", i,
                                              " has no value"));
    }
  }
  decoding.Stop();
  if (op_runner_ != nullptr) {
    // The client's flush-denormal and thread count, as for an op: the
    // executor thread last ran some other client's kernel.
    const StageTimer settings_stage(context.timing, CostStage::kSettings);
    const absl::StatusOr<int> threads =
        op_runner_->ApplyModuleSettings(launch.settings());
    if (!threads.ok()) {
      return InvalidValueError(
          absl::StrCat("compiled kernel ", launch.kernel(),
                       ": settings: ", threads.status().message()));
    }
    if (context.timing != nullptr && context.timing->enabled) {
      context.timing->kernel_threads = *threads;
    }
  }
  char error[kModuleErrorBytes] = {};
  StageTimer kernel(context.timing, CostStage::kKernel);
  const absl::StatusOr<int> failed =
      CallModuleEntry((*module)->entry(), pointers.data(),
                      static_cast<uint32_t>(count), error, sizeof(error));
  kernel.Stop();
  DeviceCounters& counters = devices_->counters(context.device);
  if (!failed.ok()) {
    // A crash: the session's state is not trustworthy any more.
    counters.kernel_failures.fetch_add(1);
    absl::Status crashed = KernelFailureError(
        absl::StrCat("compiled kernel ", launch.kernel(), " (module ",
                     (*module)->name(), ") ", failed.status().message()));
    context.session->MakeSticky(crashed);
    return crashed;
  }
  if (*failed != 0) {
    counters.kernel_failures.fetch_add(1);
    error[sizeof(error) - 1] = '\0';
    return MakeError(
        proto::KERNEL_FAILURE,
        absl::StrCat("compiled kernel ", launch.kernel(), " (module ",
                     (*module)->name(), ") failed: ", error));
  }
  counters.kernels_executed.fetch_add(1);
  return absl::OkStatus();
}

}  // namespace openreg::daemon
