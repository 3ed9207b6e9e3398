// IPC handles: how one process names device memory (or an event) of
// another on the same daemon. A handle is 64 opaque bytes, like
// cudaIpcMemHandle_t, that a client may send anywhere (a pipe, a pickle);
// only the daemon that made it can resolve it, and only for a process of
// the exporter's uid.
//
//   [magic "ORIPC" + kind + version + zero: 8][daemon instance: 8]
//   [export id: 8][secret: 16][offset into the exported allocation: 8]
//   [zero: 16]
//
// The daemon instance (random per daemon start) makes handles of another
// (or an earlier) daemon fail with a clear error; the secret (random per
// export) makes a handle unguessable from the export id.
#ifndef OPENREG_DATA_PLANE_IPC_HANDLE_H_
#define OPENREG_DATA_PLANE_IPC_HANDLE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace openreg {

inline constexpr size_t kIpcHandleBytes = 64;

enum class IpcHandleKind : uint8_t { kMemory = 1, kEvent = 2 };

struct IpcHandle {
  IpcHandleKind kind = IpcHandleKind::kMemory;
  uint64_t daemon_instance = 0;
  uint64_t export_id = 0;
  std::array<uint8_t, 16> secret{};
  uint64_t offset = 0;
};

// The 64 bytes of `handle`.
std::string EncodeIpcHandle(const IpcHandle& handle);

// Parses 64 bytes from EncodeIpcHandle. INVALID_VALUE names what is wrong:
// the length, the magic (not an openreg handle), the version, the kind
// (a memory handle given for an event or the reverse), nonzero padding.
absl::StatusOr<IpcHandle> DecodeIpcHandle(absl::string_view bytes,
                                          IpcHandleKind expected);

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_IPC_HANDLE_H_
