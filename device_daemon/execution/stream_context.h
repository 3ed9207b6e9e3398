// What a command needs to know about the stream it runs on.
#ifndef OPENREG_DEVICE_DAEMON_EXECUTION_STREAM_CONTEXT_H_
#define OPENREG_DEVICE_DAEMON_EXECUTION_STREAM_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "data_plane/session_layout.h"
#include "device_daemon/execution/command_timing.h"

namespace openreg::daemon {

class PreparedLaunch;
class Session;

struct StreamContext {
  Session* session = nullptr;
  uint32_t slot_index = 0;
  StreamSlot* slot = nullptr;  // in the session's segment
  int device = 0;              // the stream's device (daemon's record)
  // Set when the stream must stop (session teardown): long waits inside a
  // command check it and give up.
  const std::atomic<bool>* stop = nullptr;
  // The running command's stage times (command_timing.h); on only while
  // the cost profile is. Owned by the stream's worker.
  CommandTiming* timing = nullptr;
  // Set by a graph replay for each recorded launch it runs: where the op
  // runner keeps what it decoded, for the next replay (OpRunner::
  // RunRepeated).
  std::unique_ptr<PreparedLaunch>* prepared_launch = nullptr;

  bool stop_requested() const {
    return stop != nullptr && stop->load(std::memory_order_acquire);
  }
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_EXECUTION_STREAM_CONTEXT_H_
