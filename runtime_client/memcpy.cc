// Copies and memset (runtime.h). Host data never travels over the control
// plane. A pinned host side (HostAlloc) is named to the daemon as (region,
// offset) and copied in one command, directly, without waiting. Pageable
// host-to-device copies are staged in the session's shared staging area
// chunk by chunk, device-to-host copies land in chunks the client then
// copies out; device-to-device copies are a single command.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "data_plane/device_address.h"
#include "openreg/runtime.h"
#include "runtime_client/client.h"
#include "runtime_client/host_regions.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The runtime API is openreg::; its machinery is openreg::client::.
using client::FormatAddress;
using client::HostRegionEntry;
using client::HostRegions;
using client::MakeError;
using client::ReturnStatus;
using client::Session;
using client::StagingChunk;
using client::StreamContext;
using client::WithSession;

namespace {

uint64_t AddressOf(const void* pointer) {
  return reinterpret_cast<uint64_t>(pointer);
}

absl::string_view KindName(MemcpyKind kind) {
  switch (kind) {
    case MemcpyKind::kHostToHost:
      return "kHostToHost";
    case MemcpyKind::kHostToDevice:
      return "kHostToDevice";
    case MemcpyKind::kDeviceToHost:
      return "kDeviceToHost";
    case MemcpyKind::kDeviceToDevice:
      return "kDeviceToDevice";
  }
  return "an unknown kind";
}

absl::Status RequireDevicePointer(const Session& session, const void* pointer,
                                  absl::string_view role,
                                  absl::string_view operation) {
  const uint64_t address = AddressOf(pointer);
  if (!IsDeviceAddress(address)) {
    return MakeError(
        Error::kInvalidValue,
        absl::StrCat("openreg: ", operation, ": the ", role, " ",
                     FormatAddress(address), " is not a device pointer"));
  }
  if (DeviceOfAddress(address) >= session.device_count()) {
    return MakeError(
        Error::kInvalidValue,
        absl::StrCat("openreg: ", operation, ": the ", role, " ",
                     FormatAddress(address), " names device ",
                     DeviceOfAddress(address), ", but the daemon has ",
                     session.device_count(), " devices"));
  }
  return absl::OkStatus();
}

absl::Status RequireHostPointer(const void* pointer, absl::string_view role,
                                absl::string_view operation) {
  if (pointer == nullptr) {
    return MakeError(
        Error::kInvalidValue,
        absl::StrCat("openreg: ", operation, ": the ", role, " is null"));
  }
  if (IsDeviceAddress(AddressOf(pointer))) {
    return MakeError(Error::kInvalidValue,
                     absl::StrCat("openreg: ", operation, ": the ", role, " ",
                                  FormatAddress(AddressOf(pointer)),
                                  " is a device pointer, not host memory "
                                  "(wrong MemcpyKind?)"));
  }
  return absl::OkStatus();
}

// Checks that `dst` and `src` are on the sides `kind` says.
absl::Status ValidateCopy(const Session& session, const void* dst,
                          const void* src, MemcpyKind kind) {
  const std::string operation = absl::StrCat("Memcpy ", KindName(kind));
  const bool dst_on_device =
      kind == MemcpyKind::kHostToDevice || kind == MemcpyKind::kDeviceToDevice;
  const bool src_on_device =
      kind == MemcpyKind::kDeviceToHost || kind == MemcpyKind::kDeviceToDevice;
  absl::Status status =
      dst_on_device
          ? RequireDevicePointer(session, dst, "destination", operation)
          : RequireHostPointer(dst, "destination", operation);
  if (!status.ok()) return status;
  return src_on_device ? RequireDevicePointer(session, src, "source", operation)
                       : RequireHostPointer(src, "source", operation);
}

absl::Status CopyHostToDevice(Session& session, StreamContext& stream,
                              uint64_t dst, const char* src, size_t count) {
  for (size_t done = 0; done < count;) {
    absl::StatusOr<std::optional<StagingChunk>> acquired =
        session.AcquireStagingChunk(/*wait_for_chunk=*/true);
    if (!acquired.ok()) return acquired.status();
    const StagingChunk& chunk = **acquired;
    const size_t bytes = std::min<size_t>(chunk.capacity, count - done);
    std::memcpy(chunk.data, src + done, bytes);
    proto::Command command;
    proto::CopyHostToDevice* copy = command.mutable_h2d();
    copy->set_staging_offset(chunk.offset);
    copy->set_dst(dst + done);
    copy->set_size(bytes);
    absl::StatusOr<uint64_t> sequence = session.SubmitCommand(stream, &command);
    if (!sequence.ok()) {
      session.staging().Release(chunk.index, chunk.last_use);
      return sequence.status();
    }
    session.staging().Release(chunk.index, {stream.slot, *sequence});
    done += bytes;
  }
  return absl::OkStatus();
}

// Keeps up to four chunks in flight: while the client copies one out, the
// daemon is already filling the next ones. With only two, each chunk's
// wake-ups (daemon worker, then client) sat on the critical path and a
// 64 MiB copy ran at 0.28x memcpy; with four it runs at ~0.5x, the bound
// of two memcpys sharing the memory bus.
class DeviceToHostCopy {
 public:
  DeviceToHostCopy(Session& session, StreamContext& stream, char* dst,
                   uint64_t src, size_t count)
      : session_(session),
        stream_(stream),
        dst_(dst),
        src_(src),
        count_(count) {}

  ~DeviceToHostCopy() {
    // On an early return the chunks are handed back; whoever takes them
    // next waits for the commands still using them.
    for (size_t i = 0; i < in_flight_count_; ++i) {
      const InFlight& entry = in_flight_[(first_ + i) % kMaxInFlight];
      session_.staging().Release(entry.chunk.index,
                                 {stream_.slot, entry.sequence});
    }
  }

  absl::Status Run() {
    size_t enqueued = 0;
    while (enqueued < count_) {
      // Block for a chunk only while holding none; otherwise drain first,
      // so that threads holding chunks never wait on each other.
      absl::StatusOr<std::optional<StagingChunk>> acquired =
          session_.AcquireStagingChunk(in_flight_count_ == 0);
      if (!acquired.ok()) return acquired.status();
      if (!acquired->has_value()) {
        absl::Status drained = FinishOldest();
        if (!drained.ok()) return drained;
        continue;
      }
      const StagingChunk& chunk = **acquired;
      const size_t bytes = std::min<size_t>(chunk.capacity, count_ - enqueued);
      proto::Command command;
      proto::CopyDeviceToHost* copy = command.mutable_d2h();
      copy->set_src(src_ + enqueued);
      copy->set_staging_offset(chunk.offset);
      copy->set_size(bytes);
      absl::StatusOr<uint64_t> sequence =
          session_.SubmitCommand(stream_, &command);
      if (!sequence.ok()) {
        session_.staging().Release(chunk.index, chunk.last_use);
        return sequence.status();
      }
      in_flight_[(first_ + in_flight_count_) % kMaxInFlight] =
          InFlight{chunk, *sequence, enqueued, bytes};
      ++in_flight_count_;
      enqueued += bytes;
      if (in_flight_count_ == kMaxInFlight) {
        absl::Status drained = FinishOldest();
        if (!drained.ok()) return drained;
      }
    }
    while (in_flight_count_ > 0) {
      absl::Status drained = FinishOldest();
      if (!drained.ok()) return drained;
    }
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kMaxInFlight = 4;

  struct InFlight {
    StagingChunk chunk;
    uint64_t sequence = 0;
    size_t host_offset = 0;
    size_t bytes = 0;
  };

  absl::Status FinishOldest() {
    const InFlight entry = in_flight_[first_];
    absl::Status waited = session_.WaitForCompletion(stream_, entry.sequence);
    if (!waited.ok()) return waited;
    // A failed copy (bad source range) leaves garbage in the chunk: report
    // the error instead of handing it to the caller.
    if (stream_.shared->error_code.load(std::memory_order_acquire) != 0) {
      return session_.TakeStreamError(stream_);
    }
    std::memcpy(dst_ + entry.host_offset, entry.chunk.data, entry.bytes);
    session_.staging().Release(entry.chunk.index,
                               {stream_.slot, entry.sequence});
    first_ = (first_ + 1) % kMaxInFlight;
    --in_flight_count_;
    return absl::OkStatus();
  }

  Session& session_;
  StreamContext& stream_;
  char* const dst_;
  const uint64_t src_;
  const size_t count_;
  std::array<InFlight, kMaxInFlight> in_flight_;
  size_t first_ = 0;
  size_t in_flight_count_ = 0;
};

// One command between device memory and a pinned host region; the daemon
// reads or writes the region when the stream reaches it.
absl::Status CopyPinned(Session& session, StreamContext& stream,
                        const HostRegionEntry& region, const char* host,
                        uint64_t device, size_t count, bool to_device) {
  proto::Command command;
  proto::HostRange* range = to_device ? command.mutable_h2d()->mutable_host()
                                      : command.mutable_d2h()->mutable_host();
  range->set_region(region.region);
  range->set_offset(static_cast<uint64_t>(host - region.base));
  if (to_device) {
    command.mutable_h2d()->set_dst(device);
    command.mutable_h2d()->set_size(count);
  } else {
    command.mutable_d2h()->set_src(device);
    command.mutable_d2h()->set_size(count);
  }
  return session.SubmitCommand(stream, &command).status();
}

absl::Status CopyDeviceToDevice(Session& session, StreamContext& stream,
                                uint64_t dst, uint64_t src, size_t count) {
  proto::Command command;
  proto::CopyDeviceToDevice* copy = command.mutable_d2d();
  copy->set_src(src);
  copy->set_dst(dst);
  copy->set_size(count);
  return session.SubmitCommand(stream, &command).status();
}

// Enqueues the copy on `stream`; validated arguments, count > 0.
absl::Status EnqueueCopy(Session& session, StreamContext& stream, void* dst,
                         const void* src, size_t count, MemcpyKind kind) {
  switch (kind) {
    case MemcpyKind::kHostToHost:
      std::memmove(dst, src, count);
      return absl::OkStatus();
    case MemcpyKind::kHostToDevice: {
      const std::optional<HostRegionEntry> pinned =
          HostRegions::Get().FindInSession(session, src, count);
      if (pinned.has_value()) {
        return CopyPinned(session, stream, *pinned,
                          static_cast<const char*>(src), AddressOf(dst), count,
                          /*to_device=*/true);
      }
      return CopyHostToDevice(session, stream, AddressOf(dst),
                              static_cast<const char*>(src), count);
    }
    case MemcpyKind::kDeviceToHost: {
      const std::optional<HostRegionEntry> pinned =
          HostRegions::Get().FindInSession(session, dst, count);
      if (pinned.has_value()) {
        return CopyPinned(session, stream, *pinned, static_cast<char*>(dst),
                          AddressOf(src), count, /*to_device=*/false);
      }
      return DeviceToHostCopy(session, stream, static_cast<char*>(dst),
                              AddressOf(src), count)
          .Run();
    }
    case MemcpyKind::kDeviceToDevice:
      return CopyDeviceToDevice(session, stream, AddressOf(dst), AddressOf(src),
                                count);
  }
  return MakeError(Error::kInvalidValue, "openreg: unknown MemcpyKind");
}

bool IsValidKind(MemcpyKind kind) {
  return kind == MemcpyKind::kHostToHost || kind == MemcpyKind::kHostToDevice ||
         kind == MemcpyKind::kDeviceToHost ||
         kind == MemcpyKind::kDeviceToDevice;
}

absl::Status UnknownKindError(MemcpyKind kind) {
  return MakeError(Error::kInvalidValue,
                   absl::StrCat("openreg: Memcpy: unknown MemcpyKind ",
                                static_cast<int>(kind)));
}

absl::Status MemcpyOn(Session& session, void* dst, const void* src,
                      size_t count, MemcpyKind kind) {
  absl::Status valid = ValidateCopy(session, dst, src, kind);
  if (!valid.ok()) return valid;
  if (count == 0) return absl::OkStatus();
  if (kind == MemcpyKind::kHostToHost) {
    std::memmove(dst, src, count);
    return absl::OkStatus();
  }
  // The default stream of the device holding the device side (the source
  // for device-to-device copies).
  const int device =
      DeviceOfAddress(AddressOf(kind == MemcpyKind::kHostToDevice ? dst : src));
  StreamContext& stream = session.DefaultStream(device);
  if (kind == MemcpyKind::kDeviceToDevice) {
    // A synchronous copy also orders after the destination device's
    // default stream, which may still be using the destination.
    const int dst_device = DeviceOfAddress(AddressOf(dst));
    if (dst_device != device) {
      StreamContext& dst_stream = session.DefaultStream(dst_device);
      absl::Status fenced = session.SubmitWait(
          stream, {dst_stream.slot,
                   dst_stream.last_submitted.load(std::memory_order_acquire)});
      if (!fenced.ok()) return fenced;
    }
  }
  absl::Status enqueued = EnqueueCopy(session, stream, dst, src, count, kind);
  if (!enqueued.ok()) return enqueued;
  return session.Synchronize(stream);
}

}  // namespace

Error Memcpy(void* dst, const void* src, size_t count, MemcpyKind kind) {
  if (!IsValidKind(kind)) return ReturnStatus(UnknownKindError(kind));
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    if (kind != MemcpyKind::kHostToHost) {
      absl::Status unsafe = client::CheckUnsafeCall("a synchronous copy");
      if (!unsafe.ok()) return unsafe;
    }
    return MemcpyOn(session, dst, src, count, kind);
  }));
}

Error MemcpyAsync(void* dst, const void* src, size_t count, MemcpyKind kind,
                  StreamId stream) {
  if (!IsValidKind(kind)) return ReturnStatus(UnknownKindError(kind));
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::Status valid = ValidateCopy(session, dst, src, kind);
    if (!valid.ok()) return valid;
    absl::StatusOr<StreamContext*> context = session.FindStream(stream);
    if (!context.ok()) return context.status();
    if (count == 0) return absl::OkStatus();
    if ((kind == MemcpyKind::kHostToDevice &&
         !HostRegions::Get().FindInSession(session, src, count).has_value()) ||
        (kind == MemcpyKind::kDeviceToHost &&
         !HostRegions::Get().FindInSession(session, dst, count).has_value())) {
      absl::Status refused = session.RefuseIfCapturing(
          **context, "a copy through pageable host memory (use pinned memory)");
      if (!refused.ok()) return refused;
    }
    return EnqueueCopy(session, **context, dst, src, count, kind);
  }));
}

Error MemsetAsync(void* device_ptr, int value, size_t count, StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::Status valid =
        RequireDevicePointer(session, device_ptr, "destination", "MemsetAsync");
    if (!valid.ok()) return valid;
    absl::StatusOr<StreamContext*> context = session.FindStream(stream);
    if (!context.ok()) return context.status();
    if (count == 0) return absl::OkStatus();
    proto::Command command;
    proto::Memset* memset = command.mutable_memset();
    memset->set_dst(AddressOf(device_ptr));
    // As cudaMemset: the value is converted to unsigned char.
    memset->set_value(static_cast<unsigned char>(value));
    memset->set_size(count);
    return session.SubmitCommand(**context, &command).status();
  }));
}

}  // namespace openreg
