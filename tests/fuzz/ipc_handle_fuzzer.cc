// IPC handles are 64 bytes a client may send anywhere and another client
// hands back to the daemon: DecodeIpcHandle and the daemon's IpcExports
// must refuse anything but a genuine handle with a clear error, and a
// genuine one must open exactly the exported memory or event (never
// memory outside the exported allocation). One exporter with one memory
// and one event export; an importer of the same uid opens the fuzzed
// bytes.
//
// Input: [mode][handle bytes...]. Handles carry a random daemon instance
// and secret, so a corpus saved by one run would never get past those
// checks in the next; the mode byte lets an input say "use this daemon's
// instance" (bit 0) and "use the secret of the export my id names" (bit
// 1), so that mutations reach the checks behind them. Bit 2 picks the kind
// DecodeIpcHandle is asked for.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data_plane/error_codes.h"
#include "data_plane/ipc_handle.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/ipc/ipc_exports.h"
#include "device_daemon/sessions/session.h"
#include "tests/fuzz/allocation_limit.h"
#include "tests/fuzz/fuzz_target.h"

namespace openreg::fuzz {
namespace {

constexpr uint64_t kExportedBytes = 4096;
constexpr size_t kInstanceAt = 8;  // data_plane/ipc_handle.h's layout
constexpr size_t kExportAt = 16;
constexpr size_t kSecretAt = 24;

struct Fixture {
  std::unique_ptr<daemon::Devices> devices;
  daemon::IpcExports exports;
  std::shared_ptr<daemon::Session> exporter;
  std::shared_ptr<daemon::Session> importer;
  IpcHandle memory;  // decoded genuine handles
  IpcHandle event;
};

std::shared_ptr<daemon::Session> NewSession(daemon::Devices* devices,
                                            uint64_t id) {
  daemon::SessionIdentity identity;
  identity.id = id;
  identity.token = 1000 + id;
  identity.peer = PeerCredentials{getpid(), getuid(), getgid()};
  SessionLimits limits;
  limits.max_streams = 4;
  limits.max_events = 64;
  limits.ring_bytes = 16 * 1024;
  limits.reply_bytes = 16 * 1024;
  limits.staging_bytes = 64 * 1024;
  return *daemon::Session::Create(identity, devices, /*executor=*/nullptr,
                                  limits);
}

Fixture& TheFixture() {
  static Fixture* fixture = [] {
    auto* f = new Fixture;
    f->devices = *daemon::Devices::Create(2, 1 << 20);
    f->exporter = NewSession(f->devices.get(), 1);
    f->importer = NewSession(f->devices.get(), 2);
    const uint64_t address = *f->exporter->Allocate(0, kExportedBytes);
    f->memory =
        *DecodeIpcHandle(*f->exports.ExportMemory(*f->exporter, address),
                         IpcHandleKind::kMemory);
    const uint32_t slot = *f->exporter->CreateEvent(1, /*enable_timing=*/false,
                                                    /*interprocess=*/true);
    f->event = *DecodeIpcHandle(*f->exports.ExportEvent(f->exporter, slot),
                                IpcHandleKind::kEvent);
    return f;
  }();
  return *fixture;
}

bool IsRefusal(const absl::Status& status) {
  const proto::ErrorCode code = ErrorCodeOf(status);
  return code == proto::INVALID_VALUE || code == proto::INVALID_HANDLE ||
         code == proto::PERMISSION_DENIED;
}

std::string Seed(uint8_t mode, IpcHandle handle) {
  return std::string(1, static_cast<char>(mode)) + EncodeIpcHandle(handle);
}

}  // namespace

std::vector<std::string> Seeds() {
  // Export ids are 1 (memory) and 2 (event) in a fresh fixture; the mode
  // supplies instance and secret.
  IpcHandle memory;
  memory.kind = IpcHandleKind::kMemory;
  memory.export_id = 1;
  IpcHandle event = memory;
  event.kind = IpcHandleKind::kEvent;
  event.export_id = 2;
  std::vector<std::string> seeds;
  for (uint64_t offset : {uint64_t{0}, uint64_t{1}, kExportedBytes - 1,
                          kExportedBytes, ~uint64_t{0}}) {
    memory.offset = offset;
    seeds.push_back(Seed(0x3, memory));
  }
  seeds.push_back(Seed(0x3 | 0x4, event));
  seeds.push_back(Seed(0x3, event));        // wrong kind
  seeds.push_back(Seed(0x1, memory));       // no secret
  seeds.push_back(Seed(0x0, memory));       // another daemon's
  seeds.push_back(Seed(0x3, IpcHandle{}));  // export 0
  seeds.push_back(std::string(1, '\x03') + "ORIPC");
  seeds.push_back(std::string(65, '\0'));
  return seeds;
}

std::vector<std::string> Dictionary() {
  return {"ORIPC", std::string("\x01\x01", 2), std::string("\x02\x01", 2),
          std::string(8, '\xff'), std::string(8, '\0')};
}

}  // namespace openreg::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace openreg;        // NOLINT(build/namespaces)
  using namespace openreg::fuzz;  // NOLINT(build/namespaces)
  Fixture& fixture = TheFixture();
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((mode & 1) && bytes.size() >= kInstanceAt + 8) {
    std::memcpy(&bytes[kInstanceAt], &fixture.memory.daemon_instance, 8);
  }
  if ((mode & 2) && bytes.size() >= kSecretAt + 16) {
    uint64_t export_id;
    std::memcpy(&export_id, &bytes[kExportAt], 8);
    const IpcHandle& named =
        export_id == fixture.event.export_id ? fixture.event : fixture.memory;
    std::memcpy(&bytes[kSecretAt], named.secret.data(), 16);
  }
  const IpcHandleKind kind =
      (mode & 4) ? IpcHandleKind::kEvent : IpcHandleKind::kMemory;

  AllocationScope allocations;
  absl::StatusOr<IpcHandle> decoded = DecodeIpcHandle(bytes, kind);
  if (decoded.ok()) {
    // Every byte is checked: a handle has one spelling (this target found
    // byte 7 unchecked once).
    OPENREG_FUZZ_CHECK(EncodeIpcHandle(*decoded) == bytes,
                       "a handle that decodes re-encodes to the same bytes");
    OPENREG_FUZZ_CHECK(decoded->kind == kind, "decoded the asked kind");
  } else {
    OPENREG_FUZZ_CHECK(ErrorCodeOf(decoded.status()) == proto::INVALID_VALUE,
                       decoded.status().ToString());
  }

  daemon::Session& importer = *fixture.importer;
  absl::StatusOr<daemon::OpenedMemory> memory =
      fixture.exports.OpenMemory(importer, bytes);
  if (memory.ok()) {
    // Only the genuine export opens, and only inside its allocation.
    const IpcHandle handle = *DecodeIpcHandle(bytes, IpcHandleKind::kMemory);
    OPENREG_FUZZ_CHECK(
        handle.export_id == fixture.memory.export_id &&
            handle.secret == fixture.memory.secret &&
            handle.daemon_instance == fixture.memory.daemon_instance,
        "a handle other than the genuine one opened memory");
    OPENREG_FUZZ_CHECK(handle.offset < kExportedBytes &&
                           memory->size == kExportedBytes - handle.offset,
                       absl::StrCat("offset ", handle.offset, " opened ",
                                    memory->size, " bytes"));
    OPENREG_FUZZ_CHECK(
        importer.ValidateRange(memory->address, memory->size).ok(),
        "the opened range is the importer's to use");
    OPENREG_FUZZ_CHECK(
        !importer.ValidateRange(memory->address, memory->size + 1).ok(),
        "and not one byte more");
    OPENREG_FUZZ_CHECK(importer.CloseImported(memory->address).ok(),
                       "close what was opened");
  } else {
    OPENREG_FUZZ_CHECK(IsRefusal(memory.status()), memory.status().ToString());
  }

  absl::StatusOr<daemon::OpenedEvent> event =
      fixture.exports.OpenEvent(importer, bytes);
  if (event.ok()) {
    const IpcHandle handle = *DecodeIpcHandle(bytes, IpcHandleKind::kEvent);
    OPENREG_FUZZ_CHECK(handle.export_id == fixture.event.export_id &&
                           handle.secret == fixture.event.secret,
                       "a handle other than the genuine one opened an event");
    OPENREG_FUZZ_CHECK(importer.DestroyEvent(event->event_slot).ok(),
                       "destroy what was opened");
  } else {
    OPENREG_FUZZ_CHECK(IsRefusal(event.status()), event.status().ToString());
  }
  OPENREG_FUZZ_CHECK(importer.imported_bytes() == 0,
                     "every open was closed: nothing stays imported");

  if (AllocationsObservable()) {
    // A 64-byte handle: error messages and table nodes, nothing that grows
    // with the input.
    const AllocationStats stats = allocations.Stats();
    OPENREG_FUZZ_CHECK(stats.largest <= 4096 && stats.peak_live <= 64 * 1024,
                       absl::StrCat("largest allocation ", stats.largest,
                                    ", peak ", stats.peak_live, " bytes"));
  }
  return 0;
}
