#include "device_daemon/execution/command_costs.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data_plane/monotonic_clock.h"

namespace openreg::daemon {

void CommandCosts::Start() {
  absl::flat_hash_map<pid_t, ThreadCpu> threads = ReadThreadCpu();
  absl::MutexLock lock(&mutex_);
  ResetLocked(std::move(threads));
  enabled_.store(true, std::memory_order_relaxed);
}

void CommandCosts::Stop() { enabled_.store(false, std::memory_order_relaxed); }

void CommandCosts::Reset() {
  absl::flat_hash_map<pid_t, ThreadCpu> threads = ReadThreadCpu();
  absl::MutexLock lock(&mutex_);
  ResetLocked(std::move(threads));
}

void CommandCosts::ResetLocked(absl::flat_hash_map<pid_t, ThreadCpu> threads) {
  started_ns_ = MonotonicNanoseconds();
  ops_.clear();
  streams_.clear();
  executor_baseline_.clear();
  for (int device = 0; device < devices_->count(); ++device) {
    executor_baseline_.push_back(
        devices_->scheduler(device).ExecutorSnapshot());
  }
  thread_baseline_ = std::move(threads);
}

uint64_t CommandCosts::ThreadCpuSinceStartLocked(
    pid_t thread, const absl::flat_hash_map<pid_t, ThreadCpu>& now) const {
  const auto current = now.find(thread);
  if (current == now.end()) return 0;
  const auto base = thread_baseline_.find(thread);
  // A thread started since the start (its id may be an ended thread's) is
  // counted from its own start.
  if (base == thread_baseline_.end() ||
      base->second.name != current->second.name ||
      base->second.cpu_ns > current->second.cpu_ns) {
    return current->second.cpu_ns;
  }
  return current->second.cpu_ns - base->second.cpu_ns;
}

proto::StreamCost& CommandCosts::StreamLocked(const StreamKey& stream) {
  proto::StreamCost& entry = streams_[StreamId{stream.session_id, stream.slot}];
  if (entry.session_id() == 0) {
    entry.set_session_id(stream.session_id);
    entry.set_pid(stream.pid);
    entry.set_stream(stream.slot);
    entry.set_device(stream.device);
  }
  return entry;
}

void CommandCosts::RecordCommand(const StreamKey& stream,
                                 absl::string_view label,
                                 const CommandTiming& timing) {
  absl::MutexLock lock(&mutex_);
  OpTotals& totals = ops_[std::make_pair(stream.device, std::string(label))];
  ++totals.count;
  for (int stage = 0; stage < kCostStages; ++stage) {
    totals.nanoseconds[stage] +=
        static_cast<uint64_t>(std::max<int64_t>(0, timing.nanoseconds[stage]));
  }
  if (timing.kernel_threads > 0) totals.kernel_threads = timing.kernel_threads;
  if (timing.synchronous) ++totals.synchronous;
  if (timing.fewer_threads) ++totals.fewer_threads;
  proto::StreamCost& entry = StreamLocked(stream);
  entry.set_commands(entry.commands() + 1);
}

void CommandCosts::RecordReplayed(int device, absl::string_view label,
                                  const CommandTiming& timing) {
  absl::MutexLock lock(&mutex_);
  OpTotals& totals =
      ops_[std::make_pair(device, absl::StrCat("graph_replay > ", label))];
  ++totals.count;
  for (int stage = 0; stage < kCostStages; ++stage) {
    totals.nanoseconds[stage] +=
        static_cast<uint64_t>(std::max<int64_t>(0, timing.nanoseconds[stage]));
  }
  if (timing.kernel_threads > 0) totals.kernel_threads = timing.kernel_threads;
  if (timing.fewer_threads) ++totals.fewer_threads;
}

void CommandCosts::RecordCompletion(const StreamKey& stream,
                                    absl::string_view label,
                                    int64_t nanoseconds) {
  absl::MutexLock lock(&mutex_);
  OpTotals& totals = ops_[std::make_pair(stream.device, std::string(label))];
  totals.nanoseconds[static_cast<int>(CostStage::kComplete)] +=
      static_cast<uint64_t>(std::max<int64_t>(0, nanoseconds));
}

void CommandCosts::RecordStreamEvent(const StreamKey& stream,
                                     StreamEvent event) {
  absl::MutexLock lock(&mutex_);
  proto::StreamCost& entry = StreamLocked(stream);
  switch (event) {
    case StreamEvent::kSlice:
      entry.set_slices(entry.slices() + 1);
      break;
    case StreamEvent::kPark:
      entry.set_parks(entry.parks() + 1);
      break;
    case StreamEvent::kRungWake:
      entry.set_rung_wakes(entry.rung_wakes() + 1);
      break;
    case StreamEvent::kPeriodicWake:
      entry.set_periodic_wakes(entry.periodic_wakes() + 1);
      break;
    case StreamEvent::kSpinWithWork:
      entry.set_spins_with_work(entry.spins_with_work() + 1);
      break;
  }
}

void CommandCosts::RecordSpin(const StreamKey& stream, int64_t nanoseconds) {
  absl::MutexLock lock(&mutex_);
  proto::StreamCost& entry = StreamLocked(stream);
  entry.set_spin_ns(entry.spin_ns() +
                    static_cast<uint64_t>(std::max<int64_t>(0, nanoseconds)));
}

void CommandCosts::AddThreadGroups(
    const absl::flat_hash_map<pid_t, ThreadCpu>& threads,
    const absl::flat_hash_map<pid_t, int>& executor_devices,
    proto::CostProfileReply* reply) const {
  // (role, device) in a fixed order: executors and workers by device, then
  // the others.
  enum class Role { kExecutors, kWorkers, kOther };
  std::map<std::tuple<bool, int, Role>, proto::ThreadGroupCost> groups;
  for (const auto& [thread, cpu] : threads) {
    Role role = Role::kOther;
    int device = -1;
    if (const auto executor = executor_devices.find(thread);
        executor != executor_devices.end()) {
      role = Role::kExecutors;
      device = executor->second;
    } else if (absl::StartsWith(cpu.name, kExecutorName) &&
               absl::SimpleAtoi(
                   absl::string_view(cpu.name).substr(kExecutorName.size()),
                   &device)) {
      // Not an executor but named as one: a thread an executor started.
      role = Role::kWorkers;
    } else {
      device = -1;  // SimpleAtoi may have written it
    }
    proto::ThreadGroupCost& group =
        groups[{role == Role::kOther, device, role}];
    if (group.role().empty()) {
      group.set_role(role == Role::kExecutors ? "executors"
                     : role == Role::kWorkers ? "openmp_workers"
                                              : "other");
      group.set_device(device);
    }
    group.set_threads(group.threads() + 1);
    group.set_cpu_ns(group.cpu_ns() +
                     ThreadCpuSinceStartLocked(thread, threads));
  }
  for (auto& [key, group] : groups) {
    *reply->add_thread_groups() = std::move(group);
  }
}

proto::CostProfileReply CommandCosts::Snapshot() const {
  proto::CostProfileReply reply;
  // Read before the lock, which every profiled command takes.
  const absl::flat_hash_map<pid_t, ThreadCpu> threads = ReadThreadCpu();
  absl::MutexLock lock(&mutex_);
  reply.set_enabled(enabled());
  reply.set_seconds(static_cast<double>(MonotonicNanoseconds() - started_ns_) /
                    1e9);
  for (const auto& [key, totals] : ops_) {
    proto::OpCost& op = *reply.add_ops();
    op.set_device(key.first);
    op.set_op(key.second);
    op.set_count(totals.count);
    const auto& ns = totals.nanoseconds;
    op.set_read_ns(ns[static_cast<int>(CostStage::kRead)]);
    op.set_wait_ns(ns[static_cast<int>(CostStage::kWait)]);
    op.set_hook_ns(ns[static_cast<int>(CostStage::kHook)]);
    op.set_settings_ns(ns[static_cast<int>(CostStage::kSettings)]);
    op.set_decode_ns(ns[static_cast<int>(CostStage::kDecode)]);
    op.set_kernel_ns(ns[static_cast<int>(CostStage::kKernel)]);
    op.set_reply_ns(ns[static_cast<int>(CostStage::kReply)]);
    op.set_complete_ns(ns[static_cast<int>(CostStage::kComplete)]);
    op.set_kernel_threads(static_cast<uint32_t>(totals.kernel_threads));
    op.set_synchronous(totals.synchronous);
    op.set_fewer_threads(totals.fewer_threads);
  }
  for (const auto& [id, stream] : streams_) *reply.add_streams() = stream;
  // Executors' thread ids, by device; the rest of their role groups below.
  absl::flat_hash_map<pid_t, int> executor_devices;
  for (int device = 0; device < devices_->count(); ++device) {
    const std::vector<DeviceScheduler::ExecutorStats> now =
        devices_->scheduler(device).ExecutorSnapshot();
    for (size_t i = 0; i < now.size(); ++i) {
      DeviceScheduler::ExecutorStats base;
      if (static_cast<size_t>(device) < executor_baseline_.size() &&
          i < executor_baseline_[device].size()) {
        base = executor_baseline_[device][i];
      }
      proto::ExecutorCost& executor = *reply.add_executors();
      executor.set_device(device);
      executor.set_executor(static_cast<uint32_t>(i));
      executor.set_busy_ns(now[i].busy_ns - base.busy_ns);
      executor.set_slices(now[i].slices - base.slices);
      executor.set_sleeps(now[i].sleeps - base.sleeps);
      executor.set_timeouts(now[i].timeouts - base.timeouts);
      if (now[i].thread_id != 0) {
        executor_devices[now[i].thread_id] = device;
        executor.set_cpu_ns(
            ThreadCpuSinceStartLocked(now[i].thread_id, threads));
      }
    }
  }
  AddThreadGroups(threads, executor_devices, &reply);
  return reply;
}

}  // namespace openreg::daemon
