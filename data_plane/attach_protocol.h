// The fixed-size messages exchanged on the attach socket. A client connects,
// sends AttachHello; the daemon checks the peer's credentials, creates the
// session and answers AttachWelcome with WelcomeFdCount(device_count) fds
// attached, in this order: the session segment (segment_bytes,
// session_layout.h) and the daemon's doorbell page (doorbell_bytes,
// doorbell.h), both to be mapped shared, then the session's ring fd of
// each device, device 0 first (eventfds, doorbell.h).
// The connection then stays open for the session's lifetime: its hang-up is
// how each side learns that the other is gone.
#ifndef OPENREG_DATA_PLANE_ATTACH_PROTOCOL_H_
#define OPENREG_DATA_PLANE_ATTACH_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "data_plane/device_address.h"
#include "data_plane/unix_socket.h"

namespace openreg {

inline constexpr uint32_t kAttachMagic = 0x4f524154;  // "ORAT"
// Fds of a welcome before the ring fds: the segment, the doorbell page.
inline constexpr size_t kWelcomeSharedFds = 2;

// Fds attached to the welcome of a daemon with `device_count` devices.
inline constexpr size_t WelcomeFdCount(size_t device_count) {
  return kWelcomeSharedFds + device_count;
}
inline constexpr size_t kMaxWelcomeFds = WelcomeFdCount(kMaxDevices);
static_assert(kMaxWelcomeFds <= kMaxPassedFds,
              "a welcome must fit in one message");

struct AttachHello {
  uint32_t magic;
  uint32_t protocol_version;
  char client_name[64];
};

struct AttachWelcome {
  uint32_t magic;
  uint32_t protocol_version;
  int32_t error_code;  // proto::ErrorCode; 0 = attached, fds attached
  uint32_t device_count;
  uint64_t session_id;
  uint64_t token;
  uint64_t segment_bytes;
  uint64_t doorbell_bytes;
  char message[256];
};

// The attach socket sits next to the gRPC socket.
inline std::string AttachSocketPath(const std::string& control_socket) {
  return control_socket + ".attach";
}

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_ATTACH_PROTOCOL_H_
