// Op launch and introspection for the torch backend (and other framework
// integrations). Kept apart from runtime.h because it exposes the protobuf
// command types.
#ifndef OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_LAUNCH_H_
#define OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_LAUNCH_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "openreg/runtime.h"
#include "protos/commands.pb.h"
#include "protos/control.pb.h"

namespace openreg {

// Enqueues an op on `stream` and returns at once. Output tensors must
// already be allocated (their shapes came from the op's Meta kernel).
// Failures inside the kernel are reported at the next synchronizing call.
Error LaunchOp(const proto::LaunchOp& op, StreamId stream = kDefaultStream);

// LaunchOp for an op already serialized: `op` holds the bytes of an
// asynchronous proto::LaunchOp (op_codec/launch_writer.h writes them
// without building the message). The daemon validates them as any command.
Error LaunchSerializedOp(std::string_view op, StreamId stream = kDefaultStream);

// Enqueues an op whose outputs the daemon allocates, waits for it and
// returns the outputs (device tensors owned by this session: free them with
// Free) in `reply`. Kernel failures are returned directly.
Error LaunchOpSync(const proto::LaunchOp& op, proto::OpReply* reply,
                   StreamId stream = kDefaultStream);

// The warnings this session's asynchronous kernels raised since the last
// call (the streams' mailboxes, data_plane/warning_mailbox.h), for the
// caller to raise after a synchronizing call. `dropped` counts those that
// did not fit. Never fails; no session means no warnings.
void TakeKernelWarnings(std::vector<proto::KernelWarning>* warnings,
                        uint64_t* dropped);

// The sequence number of the last command submitted to `stream`.
uint64_t LastSubmitted(StreamId stream);

// Daemon-wide statistics (per-device memory and kernel counters, sessions).
Error GetStats(proto::GetStatsReply* stats);

// The daemon's cost profile (where its time goes per op, stream and
// executor): `action` starts (and resets), stops, resets or only reads it;
// `reply` gets what it counted.
Error CostProfile(proto::CostProfileRequest::Action action,
                  proto::CostProfileReply* reply);

// torch.profiler's device timeline. `on`: the daemon starts recording when
// each kernel, copy, memset and collective of this session runs (and
// forgets an earlier record); off: it stops and `reply` gets the record
// (CLOCK_MONOTONIC times, the correlation id each command carried).
Error TraceActivity(bool on, proto::TraceActivityReply* reply);

// The profiler's correlation id of the CPU op this thread runs now (0:
// none): every command the thread submits carries it.
void SetCommandCorrelationId(uint64_t id);

}  // namespace openreg

#endif  // OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_LAUNCH_H_
