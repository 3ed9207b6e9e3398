#include "device_daemon/stream_worker.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "data_plane/command_ring.h"
#include "device_daemon/command_executor.h"
#include "device_daemon/errors.h"
#include "device_daemon/execution_gate.h"
#include "device_daemon/log.h"
#include "device_daemon/session.h"
#include "google/protobuf/arena.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {
namespace {

// How long an idle worker sleeps before re-checking its stop flags.
constexpr absl::Duration kIdleSlice = absl::Milliseconds(100);
// Fits a launch with dozens of tensor arguments; larger commands make the
// arena take (and on reset return) extra blocks.
constexpr size_t kCommandArenaBytes = 64 * 1024;

template <size_t N>
void CopyText(char (&field)[N], absl::string_view text) {
  const size_t length = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), length);
  field[length] = '\0';
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

StreamWorker::StreamWorker(Session* session, uint32_t slot, int device,
                           CommandExecutor* executor)
    : session_(session),
      slot_index_(slot),
      device_(device),
      executor_(executor),
      slot_(session->stream_slot(slot)),
      priority_(ClampStreamPriority(slot_->priority)),
      gate_(&session->devices().gate(device)),
      thread_([this] { Run(); }) {}

StreamWorker::~StreamWorker() {
  RequestStop();
  Join();
}

void StreamWorker::RequestStop() {
  stop_.store(true, std::memory_order_release);
  // Wakes the thread if it sleeps on the ring, on another stream or in the
  // device's gate.
  slot_->ring.tail.WakeAll();
  gate_->Wake();
}

void StreamWorker::RequestDrainAndStop() {
  drain_.store(true, std::memory_order_release);
  slot_->ring.tail.WakeAll();
}

void StreamWorker::Join() {
  absl::MutexLock lock(&join_mutex_);
  if (thread_.joinable()) thread_.join();
}

void StreamWorker::Fault(uint64_t sequence, const absl::Status& status) {
  Log(LogLevel::kWarning, "session ", session_->id(), " stream ", slot_index_,
      " faulted: ", status.message());
  RecordStreamError(slot_, sequence, "stream", status);
  slot_->state.store(static_cast<uint32_t>(StreamState::kFaulted),
                     std::memory_order_release);
}

void StreamWorker::Run() {
  RingReader reader(&slot_->ring, session_->ring_buffer(slot_index_),
                    session_->limits().ring_bytes);
  const StreamContext context{session_, slot_index_, slot_, device_, &stop_};
  uint64_t last_sequence = slot_->completed.Load();
  std::string payload;
  // Each command is parsed into an arena reset per command, so parsing
  // allocates nothing once the first block fits a typical command.
  std::vector<char> arena_block(kCommandArenaBytes);
  google::protobuf::ArenaOptions arena_options;
  arena_options.initial_block = arena_block.data();
  arena_options.initial_block_size = arena_block.size();
  google::protobuf::Arena arena(arena_options);
  while (!stop_.load(std::memory_order_acquire)) {
    const absl::Status read = reader.TryRead(&payload);
    if (absl::IsUnavailable(read)) {  // empty ring
      if (drain_.load(std::memory_order_acquire)) break;
      reader.WaitForData(kIdleSlice);
      continue;
    }
    const uint64_t expected = last_sequence + 1;
    if (!read.ok()) {
      Fault(expected, read);
      break;
    }
    arena.Reset();
    proto::Command& command =
        *google::protobuf::Arena::CreateMessage<proto::Command>(&arena);
    if (!command.ParseFromString(payload)) {
      // The record is taken to be command `expected`: it fails, and the
      // stream goes on with the next one.
      RecordStreamError(slot_, expected, "command",
                        InvalidValueError("malformed command"));
      last_sequence = expected;
      slot_->completed.Advance(last_sequence);
      continue;
    }
    if (command.sequence() != expected) {
      Fault(expected, absl::DataLossError(absl::StrCat(
                          "stream ", slot_index_, " received command ",
                          command.sequence(), " but expected ", expected,
                          ": commands were lost or reordered")));
      break;
    }
    absl::Status status;
    {
      // Only kernels compete for the device's execution slots.
      ExecutionSlot execution(
          command.body_case() == proto::Command::kLaunch ? gate_ : nullptr,
          priority_, &stop_);
      if (!execution.ok()) break;  // stopped while waiting for a slot
      status = executor_->Execute(context, command);
    }
    session_->CountCommand();
    if (!status.ok()) {
      Log(LogLevel::kDebug, "session ", session_->id(), " stream ", slot_index_,
          " command ", expected, " (", CommandName(command),
          ") failed: ", status.message());
      RecordStreamError(slot_, expected, CommandName(command), status);
    }
    last_sequence = expected;
    slot_->completed.Advance(last_sequence);
  }
  finished_.store(true, std::memory_order_release);
}

}  // namespace openreg::daemon
