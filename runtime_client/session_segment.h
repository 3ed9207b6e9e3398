// Checks a session segment received from the daemon before the client
// trusts any offset in it. The segment comes from another process: a
// mismatched build or a corrupt header must become an error, not a wild
// pointer.
#ifndef OPENREG_RUNTIME_CLIENT_SESSION_SEGMENT_H_
#define OPENREG_RUNTIME_CLIENT_SESSION_SEGMENT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "data_plane/session_layout.h"

namespace openreg::client {

// `header` is the start of a mapping of `mapped_bytes` bytes. Checks magic,
// protocol version, session id, limits and that every region (stream and
// event slots, rings, reply areas, staging) lies inside the mapping.
absl::Status ValidateSessionHeader(const SessionHeader& header,
                                   uint64_t mapped_bytes,
                                   uint64_t expected_session_id);

}  // namespace openreg::client

#endif  // OPENREG_RUNTIME_CLIENT_SESSION_SEGMENT_H_
