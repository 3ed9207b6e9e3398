#include "data_plane/ipc_handle.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "data_plane/error_codes.h"

namespace openreg {
namespace {

constexpr char kMagic[5] = {'O', 'R', 'I', 'P', 'C'};
constexpr uint8_t kVersion = 1;

// Fixed offsets of the wire layout (see the header).
constexpr size_t kKindAt = 5;
constexpr size_t kVersionAt = 6;
constexpr size_t kReservedAt = 7;  // zero
constexpr size_t kInstanceAt = 8;
constexpr size_t kExportAt = 16;
constexpr size_t kSecretAt = 24;
constexpr size_t kOffsetAt = 40;
constexpr size_t kPaddingAt = 48;

void Put64(std::string& bytes, size_t at, uint64_t value) {
  std::memcpy(bytes.data() + at, &value, sizeof(value));
}

uint64_t Get64(absl::string_view bytes, size_t at) {
  uint64_t value;
  std::memcpy(&value, bytes.data() + at, sizeof(value));
  return value;
}

const char* KindName(IpcHandleKind kind) {
  return kind == IpcHandleKind::kMemory ? "a memory" : "an event";
}

absl::Status Invalid(absl::string_view why) {
  return MakeError(proto::INVALID_VALUE,
                   absl::StrCat("invalid IPC handle: ", why));
}

}  // namespace

std::string EncodeIpcHandle(const IpcHandle& handle) {
  std::string bytes(kIpcHandleBytes, '\0');
  std::memcpy(bytes.data(), kMagic, sizeof(kMagic));
  bytes[kKindAt] = static_cast<char>(handle.kind);
  bytes[kVersionAt] = static_cast<char>(kVersion);
  Put64(bytes, kInstanceAt, handle.daemon_instance);
  Put64(bytes, kExportAt, handle.export_id);
  std::memcpy(bytes.data() + kSecretAt, handle.secret.data(),
              handle.secret.size());
  Put64(bytes, kOffsetAt, handle.offset);
  return bytes;
}

absl::StatusOr<IpcHandle> DecodeIpcHandle(absl::string_view bytes,
                                          IpcHandleKind expected) {
  if (bytes.size() != kIpcHandleBytes) {
    return Invalid(absl::StrCat("a handle is ", kIpcHandleBytes,
                                " bytes, this one has ", bytes.size(),
                                " (truncated or not a handle)"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Invalid("not an openreg IPC handle");
  }
  if (static_cast<uint8_t>(bytes[kVersionAt]) != kVersion) {
    return Invalid(absl::StrCat("handle format version ",
                                static_cast<int>(bytes[kVersionAt]),
                                ", this openreg reads version ", kVersion));
  }
  const auto kind = static_cast<IpcHandleKind>(bytes[kKindAt]);
  if (kind != IpcHandleKind::kMemory && kind != IpcHandleKind::kEvent) {
    return Invalid("unknown handle kind");
  }
  if (kind != expected) {
    return Invalid(absl::StrCat("this is ", KindName(kind), " handle, not ",
                                KindName(expected), " handle"));
  }
  if (bytes[kReservedAt] != '\0') return Invalid("corrupted (nonzero padding)");
  for (size_t i = kPaddingAt; i < kIpcHandleBytes; ++i) {
    if (bytes[i] != '\0') return Invalid("corrupted (nonzero padding)");
  }
  IpcHandle handle;
  handle.kind = kind;
  handle.daemon_instance = Get64(bytes, kInstanceAt);
  handle.export_id = Get64(bytes, kExportAt);
  std::memcpy(handle.secret.data(), bytes.data() + kSecretAt,
              handle.secret.size());
  handle.offset = Get64(bytes, kOffsetAt);
  return handle;
}

}  // namespace openreg
