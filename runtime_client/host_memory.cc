// Pinned host memory (runtime.h): HostAlloc creates a memfd sealed against
// shrinking, maps it populated, and registers it with the daemon
// (RegisterHostRegion names it by fd number; the daemon opens it through
// /proc and maps it too). The fd is closed once both mappings exist.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data_plane/unique_fd.h"
#include "openreg/runtime.h"
#include "runtime_client/client.h"
#include "runtime_client/host_regions.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The runtime API is openreg::; its machinery is openreg::client::.
using client::Client;
using client::HostRegionEntry;
using client::HostRegions;
using client::KeyOf;
using client::MakeError;
using client::ReturnStatus;
using client::Session;
using client::StreamContext;
using client::WithSession;

namespace {

uint64_t PageRounded(uint64_t size) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (size + page - 1) / page * page;
}

absl::Status ErrnoError(Error code, absl::string_view what, uint64_t size) {
  return MakeError(code, absl::StrCat("openreg: HostAlloc(", size, "): ", what,
                                      ": ", std::strerror(errno)));
}

absl::Status HostAllocOn(Session& session, void** ptr, size_t size) {
  const uint64_t mapped = PageRounded(size);
  UniqueFd fd(memfd_create("openreg-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd.get() < 0) {
    return ErrnoError(Error::kResourceExhausted, "memfd_create", size);
  }
  if (ftruncate(fd.get(), static_cast<off_t>(mapped)) != 0) {
    return ErrnoError(Error::kResourceExhausted, "ftruncate", size);
  }
  // The daemon refuses regions that could shrink under its mapping.
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
      0) {
    return ErrnoError(Error::kInternal, "sealing the memfd", size);
  }
  // Populated now, like page-locked memory: the first copy does not pay
  // for page faults.
  void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (data == MAP_FAILED) {
    return ErrnoError(Error::kResourceExhausted, "mmap", size);
  }
  proto::RegisterHostRegionRequest request;
  session.FillRef(request.mutable_session());
  request.set_client_fd(fd.get());
  request.set_size(mapped);
  proto::RegisterHostRegionReply reply;
  absl::Status registered = session.Call(
      "RegisterHostRegion", &proto::DeviceDaemon::Stub::RegisterHostRegion,
      request, &reply);
  if (registered.ok() && reply.region() == 0) {
    registered = MakeError(Error::kInternal,
                           "openreg: the daemon returned host region 0");
  }
  if (!registered.ok()) {
    munmap(data, mapped);
    return registered;
  }
  HostRegions::Get().Add(HostRegionEntry{static_cast<char*>(data), size, mapped,
                                         reply.region(), KeyOf(session)});
  *ptr = data;
  return absl::OkStatus();
}

// Waits for every queued command of the session: any of them may name the
// region. Errors (a faulted stream, a lost daemon) do not keep the memory
// alive: such commands will never run.
void DrainSession(Session& session) {
  std::vector<StreamContext*> streams;
  session.ForEachActiveStream(
      [&streams](StreamContext& stream) { streams.push_back(&stream); });
  for (StreamContext* stream : streams) {
    session
        .WaitForCompletion(
            *stream, stream->last_submitted.load(std::memory_order_acquire))
        .IgnoreError();
  }
}

}  // namespace

Error HostAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) {
    return ReturnStatus(
        MakeError(Error::kInvalidValue, "openreg: HostAlloc: ptr is null"));
  }
  *ptr = nullptr;
  if (size == 0) return ReturnStatus(absl::OkStatus());
  return ReturnStatus(WithSession(
      [&](Session& session) { return HostAllocOn(session, ptr, size); }));
}

Error HostFree(void* ptr) {
  if (ptr == nullptr) return ReturnStatus(absl::OkStatus());
  // It waits for the session's queued work, as cudaFreeHost does.
  if (absl::Status unsafe = client::CheckUnsafeCall("freeing pinned memory");
      !unsafe.ok()) {
    return ReturnStatus(unsafe);
  }
  std::optional<HostRegionEntry> entry = HostRegions::Get().Remove(ptr);
  if (!entry.has_value()) {
    return ReturnStatus(MakeError(
        Error::kInvalidValue,
        absl::StrCat("openreg: HostFree(", "0x",
                     absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                     "): not a pointer returned by HostAlloc (or already "
                     "freed)")));
  }
  absl::Status status;
  std::shared_ptr<Session> session = Client::Get().CurrentSession();
  if (session != nullptr && KeyOf(*session) == entry->session &&
      session->CheckAlive().ok()) {
    DrainSession(*session);
    proto::UnregisterHostRegionRequest request;
    session->FillRef(request.mutable_session());
    request.set_region(entry->region);
    proto::UnregisterHostRegionReply reply;
    status = session->Call("UnregisterHostRegion",
                           &proto::DeviceDaemon::Stub::UnregisterHostRegion,
                           request, &reply);
  }
  // The daemon keeps its own mapping while a command still uses it; ours
  // can go now.
  munmap(entry->base, entry->mapped);
  return ReturnStatus(status);
}

Error HostGetRegion(const void* ptr, HostRegionInfo* info) {
  if (info == nullptr) {
    return ReturnStatus(MakeError(Error::kInvalidValue,
                                  "openreg: HostGetRegion: info is null"));
  }
  std::optional<HostRegionEntry> entry = HostRegions::Get().Find(ptr, 1);
  std::shared_ptr<Session> session = Client::Get().CurrentSession();
  if (!entry.has_value() || session == nullptr ||
      !(KeyOf(*session) == entry->session)) {
    return ReturnStatus(MakeError(
        Error::kInvalidValue,
        absl::StrCat("openreg: HostGetRegion(", "0x",
                     absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
                     "): not inside memory from HostAlloc of the current "
                     "session")));
  }
  info->base = entry->base;
  info->size = entry->size;
  info->region = entry->region;
  info->offset = static_cast<const char*>(ptr) - entry->base;
  return ReturnStatus(absl::OkStatus());
}

bool IsHostAllocated(const void* ptr) {
  return HostRegions::Get().Find(ptr, 1).has_value();
}

}  // namespace openreg
