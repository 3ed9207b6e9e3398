// Serializes commands for a stream's ring into a thread-local buffer, so
// that the per-op path allocates nothing once the buffer has grown.
#ifndef OPENREG_RUNTIME_CLIENT_COMMAND_ENCODING_H_
#define OPENREG_RUNTIME_CLIENT_COMMAND_ENCODING_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "protos/commands.pb.h"

namespace openreg::client {

// `command` serialized; valid until the next call on this thread.
absl::string_view EncodeCommand(const proto::Command& command);

// The bytes of Command{sequence, launch = op} without copying `op` into a
// Command. With `force_synchronous`, the encoded op has synchronous = true
// even if `op` does not (see the .cc for how). Valid until the next call on
// this thread.
absl::string_view EncodeLaunchCommand(uint64_t sequence,
                                      const proto::LaunchOp& op,
                                      bool force_synchronous);

// The bytes of Command{sequence, launch = op} for an op already serialized
// (an asynchronous proto::LaunchOp's bytes). Valid until the next call on
// this thread.
absl::string_view EncodeSerializedLaunchCommand(uint64_t sequence,
                                                absl::string_view op);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_COMMAND_ENCODING_H_
