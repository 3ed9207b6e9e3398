#include "device_daemon/execution/stream_worker.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "data_plane/monotonic_clock.h"
#include "data_plane/spin_wait.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"
#include "device_daemon/devices/blocking_region.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/sessions/session.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {
namespace {

// Fits a launch with dozens of tensor arguments; larger commands make the
// arena take (and on reset return) extra blocks.
constexpr size_t kCommandArenaBytes = 64 * 1024;
// A slice: a stream keeps its executor for this long (or this many
// commands, whichever comes first) when other streams of its priority wait,
// as a GPU time-slices between contexts. Long enough that a client's batch
// of small ops usually completes in one slice: with short slices (8
// commands) 64 clients' batches all completed at the end of the same round,
// their clients then woke together and the executors idled while they
// encoded (bench/sections_clients.py: 64 clients 1.23-1.29x of 2 clients'
// time per op with 8 commands, 1.17-1.21x with 500 us).
constexpr int kSliceCommands = 256;
constexpr absl::Duration kSliceTime = absl::Microseconds(500);

template <size_t N>
void CopyText(char (&field)[N], absl::string_view text) {
  const size_t length = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), length);
  field[length] = '\0';
}

google::protobuf::ArenaOptions CommandArenaOptions(std::vector<char>* block) {
  google::protobuf::ArenaOptions options;
  options.initial_block = block->data();
  options.initial_block_size = block->size();
  return options;
}

}  // namespace

void RecordStreamError(StreamSlot* slot, uint64_t sequence,
                       absl::string_view op, const absl::Status& status) {
  if (slot->error_code.load(std::memory_order_acquire) != 0) return;
  slot->error_sequence = sequence;
  CopyText(slot->error_op, op);
  CopyText(slot->error_message, status.message());
  slot->error_code.store(static_cast<uint32_t>(ErrorCodeOf(status)),
                         std::memory_order_release);
}

std::shared_ptr<StreamWorker> StreamWorker::Start(Session* session,
                                                  uint32_t slot, int device,
                                                  CommandExecutor* executor) {
  auto worker = std::make_shared<StreamWorker>(session, slot, device, executor);
  worker->started_.store(true, std::memory_order_release);
  worker->scheduler_->Add(worker);
  return worker;
}

StreamWorker::StreamWorker(Session* session, uint32_t slot, int device,
                           CommandExecutor* executor)
    : session_(session),
      slot_index_(slot),
      device_(device),
      executor_(executor),
      slot_(session->stream_slot(slot)),
      priority_(ClampStreamPriority(slot_->priority)),
      scheduler_(&session->devices().scheduler(device)),
      cost_key_{session->id(), session->pid(), slot, device},
      reader_(&slot_->ring, session->ring_buffer(slot),
              session->limits().ring_bytes),
      context_{session, slot, slot_, device, &stop_, &timing_},
      last_sequence_(slot_->completed.Load()),
      arena_block_(kCommandArenaBytes),
      arena_(CommandArenaOptions(&arena_block_)) {}

StreamWorker::~StreamWorker() {
  // The scheduler holds a reference until the stream finished, so a worker
  // that was started is always finished here.
  if (started_.load(std::memory_order_acquire) && !finished()) {
    RequestStop();
    Join();
  }
}

void StreamWorker::RequestStop() {
  stop_.store(true, std::memory_order_release);
  // A parked stream has no executor to notice: queue it.
  scheduler_->Wake(this);
}

void StreamWorker::RequestDrainAndStop() {
  drain_.store(true, std::memory_order_release);
  scheduler_->Wake(this);
}

void StreamWorker::Join() {
  if (!started_.load(std::memory_order_acquire)) return;
  // Joining from an executor (never done today) would hold it meanwhile.
  BlockingRegion blocking;
  absl::MutexLock lock(&finish_mutex_);
  finish_mutex_.Await(absl::Condition(&finish_signaled_));
}

bool StreamWorker::JoinFor(absl::Duration timeout) {
  if (!started_.load(std::memory_order_acquire)) return true;
  BlockingRegion blocking;
  absl::MutexLock lock(&finish_mutex_);
  return finish_mutex_.AwaitWithTimeout(absl::Condition(&finish_signaled_),
                                        timeout);
}

void StreamWorker::Finished() {
  absl::MutexLock lock(&finish_mutex_);
  finished_.store(true, std::memory_order_release);
  finish_signaled_ = true;
}

bool StreamWorker::StopOrDrainRequested() const {
  return stop_.load(std::memory_order_acquire) ||
         drain_.load(std::memory_order_acquire);
}

CommandCosts* StreamWorker::costs() const {
  CommandCosts& costs = executor_->costs();
  return costs.enabled() ? &costs : nullptr;
}

bool StreamWorker::WantsToRun(bool housekeeping) const {
  if (StopOrDrainRequested()) return true;
  // The client cleared the flag after publishing a command.
  if (slot_->parked.load(std::memory_order_seq_cst) == 0) {
    if (CommandCosts* costs = this->costs()) {
      costs->RecordStreamEvent(cost_key_, StreamEvent::kRungWake);
    }
    return true;
  }
  // A command published without clearing the flag (a client that does not
  // follow the protocol) is found by the periodic check.
  if (!housekeeping || !reader_.HasData()) return false;
  if (CommandCosts* costs = this->costs()) {
    costs->RecordStreamEvent(cost_key_, StreamEvent::kPeriodicWake);
  }
  return true;
}

void StreamWorker::Fault(uint64_t sequence, const absl::Status& status) {
  Log(LogLevel::kWarning, "session ", session_->id(), " stream ", slot_index_,
      " faulted: ", status.message());
  RecordStreamError(slot_, sequence, "stream", status);
  slot_->state.store(static_cast<uint32_t>(StreamState::kFaulted),
                     std::memory_order_release);
}

StreamWorker::Step StreamWorker::RunOne() {
  CommandCosts* costs = this->costs();
  timing_.enabled = costs != nullptr;
  if (costs != nullptr) timing_.Clear();
  StageTimer reading(&timing_, CostStage::kRead);
  const absl::Status read = reader_.TryRead(&payload_);
  if (absl::IsUnavailable(read)) return Step::kEmpty;
  if (costs == nullptr && (costs = this->costs()) != nullptr) {
    // The profile started while this worker looked at the ring: a command
    // its client wrote after the profile started still counts (all but its
    // read stage).
    timing_.Clear();
    timing_.enabled = true;
  }
  const uint64_t expected = last_sequence_ + 1;
  if (!read.ok()) {
    Fault(expected, read);
    return Step::kStop;
  }
  arena_.Reset();
  proto::Command& command =
      *google::protobuf::Arena::CreateMessage<proto::Command>(&arena_);
  if (!command.ParseFromString(payload_)) {
    // The record is taken to be command `expected`: it fails, and the
    // stream goes on with the next one.
    RecordStreamError(slot_, expected, "command",
                      InvalidValueError("malformed command"));
    last_sequence_ = expected;
    slot_->completed.Advance(last_sequence_);
    return Step::kRan;
  }
  if (command.sequence() != expected) {
    Fault(expected, absl::DataLossError(absl::StrCat(
                        "stream ", slot_index_, " received command ",
                        command.sequence(), " but expected ", expected,
                        ": commands were lost or reordered")));
    return Step::kStop;
  }
  reading.Stop();
  if (costs != nullptr) {
    timing_.Add(CostStage::kWait, slice_wait_ns_);
    slice_wait_ns_ = 0;
  }
  ActivityTrace& trace = session_->activity_trace();
  const bool traced = trace.on();
  const int64_t started_ns = traced ? MonotonicNanoseconds() : 0;
  const absl::Status status = executor_->Execute(context_, command);
  if (traced) RecordActivity(command, started_ns, MonotonicNanoseconds());
  session_->CountCommand();
  if (!status.ok()) {
    Log(LogLevel::kInfo, "session ", session_->id(), " (pid ", session_->pid(),
        "): openreg:", device_, " stream ", slot_index_, " command ", expected,
        " (", CommandName(command),
        ") failed: ", proto::ErrorCode_Name(ErrorCodeOf(status)), ": ",
        status.message());
    RecordStreamError(slot_, expected, CommandName(command), status);
  }
  // Counted before its completion is published: a client that synchronized
  // and then read the profile sees this command (CI once missed the last
  // op of a profiled block). Only its complete stage is added after.
  if (costs != nullptr) {
    timing_.synchronous =
        command.has_launch() && command.launch().synchronous();
    costs->RecordCommand(cost_key_, CommandName(command), timing_);
  }
  const int64_t completing_ns = costs != nullptr ? MonotonicNanoseconds() : 0;
  last_sequence_ = expected;
  slot_->completed.Advance(last_sequence_);
  if (costs != nullptr) {
    costs->RecordCompletion(cost_key_, CommandName(command),
                            MonotonicNanoseconds() - completing_ns);
  }
  return Step::kRan;
}

void StreamWorker::RecordActivity(const proto::Command& command,
                                  int64_t started_ns, int64_t ended_ns) {
  proto::DeviceActivity activity;
  switch (command.body_case()) {
    case proto::Command::kLaunch:
    case proto::Command::kLaunchModule:
      activity.set_kind(proto::DeviceActivity::KERNEL);
      break;
    case proto::Command::kH2D:
      activity.set_bytes(command.h2d().size());
      activity.set_kind(proto::DeviceActivity::COPY);
      break;
    case proto::Command::kD2H:
      activity.set_bytes(command.d2h().size());
      activity.set_kind(proto::DeviceActivity::COPY);
      break;
    case proto::Command::kD2D:
      activity.set_bytes(command.d2d().size());
      activity.set_kind(proto::DeviceActivity::COPY);
      break;
    case proto::Command::kMemset:
      activity.set_bytes(command.memset().size());
      activity.set_kind(proto::DeviceActivity::MEMSET);
      break;
    case proto::Command::kCollective:
      activity.set_kind(proto::DeviceActivity::COLLECTIVE);
      break;
    default:
      return;  // events, waits and frees take no device time of their own
  }
  activity.set_device(device_);
  activity.set_stream(slot_index_);
  activity.set_sequence(command.sequence());
  activity.set_correlation_id(command.correlation_id());
  activity.set_name(CommandName(command));
  activity.set_start_ns(started_ns);
  activity.set_end_ns(ended_ns);
  session_->activity_trace().Record(std::move(activity));
}

bool StreamWorker::SpinForWork(DeviceScheduler* scheduler) {
  if (!scheduler->MaySpin()) return false;
  CommandCosts* const costs = this->costs();
  const absl::Time start = absl::Now();
  bool found = false;
  // kSpinBeforeSleep: a stream fed back to back never pays a park and a
  // doorbell.
  const absl::Time until = start + kSpinBeforeSleep;
  while (absl::Now() < until) {
    SpinPause();
    if (reader_.HasData() || StopOrDrainRequested()) {
      found = true;
      break;
    }
    // Someone else is ready: give the executor to them.
    if (scheduler->OthersWaiting()) break;
  }
  if (costs != nullptr) {
    costs->RecordSpin(cost_key_, absl::ToInt64Nanoseconds(absl::Now() - start));
    if (found) costs->RecordStreamEvent(cost_key_, StreamEvent::kSpinWithWork);
  }
  return found;
}

DeviceScheduler::Runner::Outcome StreamWorker::RunSlice(
    DeviceScheduler* scheduler) {
  // Running: a client need not ring for this stream. (A stale 1 left by a
  // client that published without clearing it would cost it a needless
  // ring, nothing else.)
  if (slot_->parked.load(std::memory_order_relaxed) != 0) {
    slot_->parked.store(0, std::memory_order_relaxed);
  }
  if (CommandCosts* costs = this->costs()) {
    costs->RecordStreamEvent(cost_key_, StreamEvent::kSlice);
    slice_wait_ns_ = MonotonicNanoseconds() - queued_ns();
  }
  absl::Time slice_start = absl::Now();
  int slice_commands = 0;
  while (true) {
    if (stop_.load(std::memory_order_acquire)) return Outcome::kFinished;
    const Step step = RunOne();
    if (step == Step::kStop) return Outcome::kFinished;
    if (step == Step::kEmpty) {
      if (drain_.load(std::memory_order_acquire)) return Outcome::kFinished;
      if (SpinForWork(scheduler)) continue;
      // Park (doorbell.h): publish the flag, then look at the ring once
      // more. A command published meanwhile is either seen here or its
      // client sees the flag and rings.
      slot_->parked.store(1, std::memory_order_seq_cst);
      if (!reader_.HasData() && !StopOrDrainRequested()) {
        if (CommandCosts* costs = this->costs()) {
          costs->RecordStreamEvent(cost_key_, StreamEvent::kPark);
        }
        return Outcome::kParked;
      }
      // Take the stream back. If the client cleared the flag first, it also
      // rings: a spurious wake, harmless.
      slot_->parked.exchange(0, std::memory_order_seq_cst);
      continue;
    }
    // A command boundary: the place to give way.
    if (scheduler->HigherPriorityWaiting(priority_)) return Outcome::kYield;
    if (++slice_commands >= kSliceCommands ||
        absl::Now() - slice_start >= kSliceTime) {
      if (scheduler->OthersWaiting()) return Outcome::kYield;
      slice_start = absl::Now();
      slice_commands = 0;
    }
  }
}

}  // namespace openreg::daemon
