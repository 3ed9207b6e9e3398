// Runs one LaunchOp with ATen's CPU kernels on daemon-owned device memory.
// The header is free of ATen so that only op_runner.cc pays for compiling
// it.
#ifndef OPENREG_DEVICE_DAEMON_OP_RUNNER_H_
#define OPENREG_DEVICE_DAEMON_OP_RUNNER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "device_daemon/stream_context.h"
#include "protos/commands.pb.h"

namespace openreg {

class OpRunner {
 public:
  OpRunner();

  // Looks the op up in the dispatcher, builds its argument stack from
  // `op.arguments` (every tensor validated against the session), calls it
  // and delivers the results:
  //  - asynchronous launch: copies each returned tensor into the matching
  //    `op.outputs` tensor (unless the op already wrote there in place);
  //  - synchronous launch: allocates the results in the session, copies
  //    them there and writes an OpReply into the stream's reply area, with
  //    reply_sequence = `sequence`.
  // Unknown ops and bad arguments are INVALID_VALUE; exceptions thrown by
  // the kernel are KERNEL_FAILURE naming the op.
  absl::Status Run(const StreamContext& context, const proto::LaunchOp& op,
                   uint64_t sequence);
};

}  // namespace openreg

#endif  // OPENREG_DEVICE_DAEMON_OP_RUNNER_H_
