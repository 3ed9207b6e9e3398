// The data plane as a hostile client sees it: bytes written into a
// stream's command ring, read by the daemon's RingReader, parsed as a
// proto::Command and validated by the CommandExecutor against the session.
// command_fuzz_test runs generated commands through real ATen kernels;
// this target works on bytes, with coverage feedback under libFuzzer, and
// a fake op runner that checks what the executor hands it.
//
// Per input: a fresh session (executor, two default streams, a pinned host
// region) whose buffers are interleaved with a guard session's buffers
// full of a canary. Whatever the input, the daemon must
//   - complete every command or fault the stream (never crash or stall),
//   - never write outside the session's own memory (guards intact), never
//     read another session's memory into the client's (no canary in the
//     segment), give the op runner only tensors inside one allocation,
//   - free everything when the session closes,
//   - allocate no more than a bound proportional to what was written.
//
// Input: records of [op][length: 2 bytes LE][body]. op & 3 is the action,
// (op >> 2) & 1 the stream (device 0's or 1's default stream):
//   0  raw record: body as one ring record, as is
//   1  command: body parsed as a Command and given the next sequence (so
//      that it reaches the executor); unparsable bodies go in raw
//   2  hostile ring positions: the body's first 8 bytes replace the ring's
//      tail (the daemon must fault the stream, not read out of bounds)
//   3  hostile record header: 8 body bytes as a record header, published
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/command_ring.h"
#include "data_plane/doorbell.h"
#include "data_plane/error_codes.h"
#include "data_plane/session_layout.h"
#include "device_daemon/base/log.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/execution/op_runner.h"
#include "device_daemon/sessions/session.h"
#include "google/protobuf/stubs/logging.h"
#include "protos/commands.pb.h"
#include "protos/errors.pb.h"
#include "tests/cpp/command_generator.h"
#include "tests/fuzz/allocation_limit.h"
#include "tests/fuzz/fuzz_target.h"

namespace openreg::fuzz {
namespace {

using daemon::Session;

constexpr uint64_t kBufferBytes = 256;
constexpr int kBuffersPerDevice = 3;
constexpr uint64_t kRingBytes = 64 * 1024;
constexpr uint64_t kHostRegionBytes = 64 * 1024;
// Distinctive bytes that only the guard session's memory holds.
constexpr char kCanary[] = "GuArD-MeMoRy-CaNaRy!";
constexpr size_t kCanaryBytes = sizeof(kCanary) - 1;
constexpr char kKernelFill = '\xa5';
// A command that neither completes nor faults its stream within this is a
// stall (every command of this target can finish: see SanitizeWaits).
constexpr absl::Duration kStall = absl::Seconds(20);

SessionLimits Limits() {
  SessionLimits limits;
  limits.max_streams = 4;
  limits.max_events = 16;
  limits.ring_bytes = kRingBytes;
  limits.reply_bytes = 16 * 1024;
  limits.staging_bytes = 64 * 1024;
  return limits;
}

// Stands in for AtenOpRunner: accepts any op, insists that every tensor it
// is given lies inside one allocation of the session (as the real runner
// relies on), and writes its outputs like a kernel would.
class CheckingOpRunner : public daemon::OpRunner {
 public:
  absl::Status Run(const daemon::StreamContext& context,
                   const proto::LaunchOp& op, uint64_t sequence,
                   daemon::WrittenTensors* written) override {
    for (const proto::Argument& argument : op.arguments()) {
      if (argument.has_tensor()) {
        absl::Status pinned = Pin(*context.session, argument.tensor(), false);
        if (!pinned.ok()) return pinned;
      }
    }
    for (const proto::TensorRef& output : op.outputs()) {
      absl::Status pinned = Pin(*context.session, output, true);
      if (!pinned.ok()) return pinned;
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status Pin(const Session& session,
                          const proto::TensorRef& tensor, bool write) {
    TensorExtent extent;
    absl::StatusOr<daemon::PinnedRange> range =
        session.PinTensor(tensor, &extent);
    if (!range.ok()) return range.status();
    if (extent.span_bytes == 0) return absl::OkStatus();
    const daemon::DeviceBuffer& buffer = *range->buffer;
    OPENREG_FUZZ_CHECK(
        range->data >= buffer.data() &&
            range->data + extent.span_bytes <= buffer.data() + buffer.size(),
        absl::StrCat("a tensor of ", extent.span_bytes, " bytes at offset ",
                     range->data - buffer.data(), " of a ", buffer.size(),
                     "-byte allocation passed validation"));
    if (write) std::memset(range->data, kKernelFill, extent.span_bytes);
    return absl::OkStatus();
  }
};

struct Daemon {
  std::unique_ptr<daemon::Devices> devices;
  CheckingOpRunner runner;
  std::unique_ptr<daemon::CommandExecutor> executor;
};

Daemon& TheDaemon() {
  static Daemon* d = [] {
    // Faulted streams and malformed strings are what this target produces
    // by the thousand; their log lines would only bury a finding.
    daemon::SetLogLevel(daemon::LogLevel::kError);
    google::protobuf::SetLogHandler(nullptr);
    auto* created = new Daemon;
    created->devices = *daemon::Devices::Create(2, 1 << 20);
    created->executor = std::make_unique<daemon::CommandExecutor>(
        created->devices.get(), &created->runner);
    return created;
  }();
  return *d;
}

std::unique_ptr<Session> NewSession(uint64_t id,
                                    daemon::CommandExecutor* executor) {
  daemon::SessionIdentity identity;
  identity.id = id;
  identity.token = 1000 + id;
  identity.peer = PeerCredentials{getpid(), getuid(), getgid()};
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Create(identity, TheDaemon().devices.get(), executor, Limits());
  OPENREG_FUZZ_CHECK(session.ok(), session.status().ToString());
  return *std::move(session);
}

// The fuzzed session, its guard and what they were given.
struct World {
  std::unique_ptr<Session> session;
  std::unique_ptr<Session> guard;
  std::vector<uint64_t> buffers;
  std::vector<uint64_t> guards;
  int host_fd = -1;
  uint32_t host_region = 0;
};

World MakeWorld() {
  Daemon& d = TheDaemon();
  World world;
  world.session = NewSession(1, d.executor.get());
  world.guard = NewSession(2, /*executor=*/nullptr);
  // Allocations come from the arena in order: guard, buffer, guard, ...,
  // guard, so that every buffer has a guard on both sides.
  for (int device = 0; device < 2; ++device) {
    for (int i = 0; i <= kBuffersPerDevice; ++i) {
      world.guards.push_back(*world.guard->Allocate(device, kBufferBytes));
      if (i < kBuffersPerDevice) {
        world.buffers.push_back(*world.session->Allocate(device, kBufferBytes));
      }
    }
  }
  for (uint64_t guard : world.guards) {
    char* data = world.guard->PinRange(guard, kBufferBytes)->data;
    for (uint64_t i = 0; i < kBufferBytes; ++i) {
      data[i] = kCanary[i % kCanaryBytes];
    }
  }
  // Arena memory is reused: start from zeros, not an earlier guard's bytes.
  for (uint64_t buffer : world.buffers) {
    std::memset(world.session->PinRange(buffer, kBufferBytes)->data, 0,
                kBufferBytes);
  }
  // What the runtime client registers (host_region.h): a memfd that
  // cannot shrink under the daemon.
  world.host_fd =
      memfd_create("openreg-fuzz-host", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  OPENREG_FUZZ_CHECK(world.host_fd >= 0 &&
                         ftruncate(world.host_fd, kHostRegionBytes) == 0 &&
                         fcntl(world.host_fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0,
                     "memfd");
  world.host_region =
      *world.session->RegisterHostRegion(world.host_fd, kHostRegionBytes);
  return world;
}

bool GuardsIntact(const World& world) {
  for (uint64_t guard : world.guards) {
    const char* data = world.guard->PinRange(guard, kBufferBytes)->data;
    for (uint64_t i = 0; i < kBufferBytes; ++i) {
      if (data[i] != kCanary[i % kCanaryBytes]) return false;
    }
  }
  return true;
}

// Whether memory the client can read, and that only the daemon writes,
// holds a piece of the guard's memory: the session's buffers, its staging
// area and its pinned host region. (Not the rings or error messages: they
// carry the input's own bytes.)
bool ClientMemoryHoldsCanary(const World& world) {
  std::vector<std::pair<const char*, size_t>> areas;
  for (uint64_t buffer : world.buffers) {
    absl::StatusOr<daemon::PinnedRange> range =
        world.session->PinRange(buffer, kBufferBytes);
    if (range.ok()) areas.emplace_back(range->data, kBufferBytes);
  }
  areas.emplace_back(world.session->staging(), Limits().staging_bytes);
  void* host =
      mmap(nullptr, kHostRegionBytes, PROT_READ, MAP_SHARED, world.host_fd, 0);
  OPENREG_FUZZ_CHECK(host != MAP_FAILED, "mmap of the host region");
  areas.emplace_back(static_cast<const char*>(host), kHostRegionBytes);
  bool found = false;
  // Any 8 consecutive canary bytes (at any phase) give it away.
  for (size_t phase = 0; phase < kCanaryBytes && !found; ++phase) {
    char piece[8];
    for (size_t i = 0; i < 8; ++i)
      piece[i] = kCanary[(phase + i) % kCanaryBytes];
    for (const auto& [data, size] : areas) {
      if (memmem(data, size, piece, sizeof(piece)) != nullptr) found = true;
    }
  }
  munmap(host, kHostRegionBytes);
  return found;
}

// Stream waits on another stream for a sequence that stream never reaches
// block until the session ends, as they should (like a CUDA stream waiting
// for an event nobody records): the client only stalls itself. To keep
// "every command completes" checkable, waits are clamped to what the other
// stream has completed.
void SanitizeWaits(proto::Command* command, const Session& session,
                   uint32_t own_slot) {
  auto clamp = [&](proto::WaitStream* wait) {
    const uint32_t slot = wait->stream_slot();
    if (slot == own_slot || slot >= Limits().max_streams) return;
    wait->set_sequence(std::min<uint64_t>(
        wait->sequence(), session.stream_slot(slot)->completed.Load()));
  };
  if (command->has_wait_stream()) clamp(command->mutable_wait_stream());
  if (command->has_free()) {
    for (proto::WaitStream& fence :
         *command->mutable_free()->mutable_fences()) {
      clamp(&fence);
    }
  }
}

// What one stream of the input has been sent.
struct Stream {
  uint32_t slot = 0;
  std::unique_ptr<RingWriter> writer;
  uint64_t sequence = 0;  // the last command's
  bool broken = false;    // the input corrupted its ring
};

bool Faulted(const StreamSlot* slot) {
  return slot->state.load() == static_cast<uint32_t>(StreamState::kFaulted);
}

// Waits until the stream ran everything it was sent or faulted.
void Settle(const Stream& stream, const Session& session) {
  StreamSlot* slot = session.stream_slot(stream.slot);
  const absl::Time deadline = absl::Now() + kStall;
  while (!Faulted(slot)) {
    if (stream.broken) {
      // Positions the input made up: done once the reader caught up (or
      // gave up) with whatever tail it was shown.
      if (slot->ring.head.Load() == slot->ring.tail.Load()) return;
    } else if (slot->completed.Load() >= stream.sequence) {
      return;
    }
    OPENREG_FUZZ_CHECK(
        absl::Now() < deadline,
        absl::StrCat("stream ", stream.slot, " neither completed command ",
                     stream.sequence, " nor faulted"));
    slot->completed.WaitForAtLeast(stream.sequence, absl::Milliseconds(5));
  }
}

// Wakes the stream's executor as a client does after publishing
// (data_plane/doorbell.h); without it a parked stream would wait for the
// scheduler's periodic check (100 ms), which only costs time here. Stream
// slot d is device d's default stream.
void RingIfParked(const Stream& stream, const Session& session) {
  if (ClaimParked(&session.stream_slot(stream.slot)->parked)) {
    RingDoorbell(session.devices().doorbell(static_cast<int>(stream.slot)),
                 session.ring_fd(static_cast<int>(stream.slot)));
  }
}

void Write(Stream& stream, const Session& session, const std::string& bytes) {
  if (bytes.size() > stream.writer->MaxPayload()) return;
  StreamSlot* slot = session.stream_slot(stream.slot);
  // The ring has room once the worker caught up (or the stream faulted,
  // after which nothing more is written to it).
  while (true) {
    if (Faulted(slot)) return;
    const absl::Status written =
        stream.writer->TryWrite(bytes.data(), bytes.size());
    if (written.ok()) {
      RingIfParked(stream, session);
      break;
    }
    OPENREG_FUZZ_CHECK(absl::IsResourceExhausted(written), written.ToString());
    Settle(stream, session);
  }
  ++stream.sequence;
}

void RunRecords(const uint8_t* data, size_t size, World& world) {
  Session& session = *world.session;
  Stream streams[2];
  for (uint32_t i = 0; i < 2; ++i) {
    streams[i].slot = i;
    streams[i].writer = std::make_unique<RingWriter>(
        &session.stream_slot(i)->ring, session.ring_buffer(i), kRingBytes);
  }
  size_t at = 0;
  while (at + 3 <= size) {
    const uint8_t op = data[at];
    size_t length = data[at + 1] | (size_t{data[at + 2]} << 8);
    at += 3;
    length = std::min(length, size - at);
    const std::string body(reinterpret_cast<const char*>(data) + at, length);
    at += length;
    Stream& stream = streams[(op >> 2) & 1];
    if (stream.broken || Faulted(session.stream_slot(stream.slot))) continue;
    StreamSlot* slot = session.stream_slot(stream.slot);
    switch (op & 3) {
      case 0:
        Write(stream, session, body);
        break;
      case 1: {
        proto::Command command;
        if (!command.ParseFromString(body)) {
          Write(stream, session, body);
          break;
        }
        command.set_sequence(stream.sequence + 1);
        SanitizeWaits(&command, session, stream.slot);
        Write(stream, session, command.SerializeAsString());
        break;
      }
      case 2: {
        uint64_t tail = 0;
        std::memcpy(&tail, body.data(), std::min<size_t>(body.size(), 8));
        Settle(stream, session);  // the real records first
        slot->ring.tail.Advance(tail);
        RingIfParked(stream, session);
        stream.broken = true;
        break;
      }
      default: {
        if (body.size() < kRecordHeaderBytes) break;
        Settle(stream, session);
        const uint64_t tail = slot->ring.tail.Load();
        std::memcpy(session.ring_buffer(stream.slot) + tail % kRingBytes,
                    body.data(), kRecordHeaderBytes);
        slot->ring.tail.Advance(tail + kRecordHeaderBytes);
        RingIfParked(stream, session);
        stream.broken = true;
      }
    }
    Settle(stream, session);
  }
  for (const Stream& stream : streams) Settle(stream, session);
}

std::string Record(uint8_t op, const std::string& body) {
  std::string record(1, static_cast<char>(op));
  record += static_cast<char>(body.size() & 0xff);
  record += static_cast<char>(body.size() >> 8);
  return record + body;
}

}  // namespace

std::vector<std::string> Seeds() {
  // The buffers' addresses are the same in every World (a fresh arena
  // state), so generated commands point into them.
  std::vector<uint64_t> buffers;
  {
    World world = MakeWorld();
    buffers = world.buffers;
    close(world.host_fd);
  }
  CommandGenerator generator(20240601, buffers, kBufferBytes);
  std::vector<std::string> seeds;
  for (int i = 0; i < 300; ++i) {
    std::string input;
    for (int n = 1 + generator.Next() % 6; n > 0; --n) {
      const uint8_t stream = (generator.Next() % 2) << 2;
      switch (generator.Next() % 10) {
        case 0:
          input += Record(stream | 0, generator.Garbage());
          break;
        case 1:
        case 2:
        case 3:
          input += Record(stream | 1, generator.Other().SerializeAsString());
          break;
        default:
          input += Record(stream | 1, generator.Launch().SerializeAsString());
      }
    }
    seeds.push_back(input);
  }
  // Host copies through the session's pinned host region (id 1).
  proto::Command h2d;
  h2d.mutable_h2d()->set_dst(buffers[0]);
  h2d.mutable_h2d()->set_size(kBufferBytes);
  h2d.mutable_h2d()->mutable_host()->set_region(1);
  h2d.mutable_h2d()->mutable_host()->set_offset(kHostRegionBytes -
                                                kBufferBytes);
  proto::Command d2h;
  d2h.mutable_d2h()->set_src(buffers[1]);
  d2h.mutable_d2h()->set_size(kBufferBytes);
  d2h.mutable_d2h()->mutable_host()->set_region(1);
  seeds.push_back(Record(1, h2d.SerializeAsString()) +
                  Record(1, d2h.SerializeAsString()));
  // Hostile positions and headers.
  std::string tail(8, '\0');
  for (uint64_t value :
       {uint64_t{8}, uint64_t{12}, kRingBytes + 8, ~uint64_t{0} - 7}) {
    std::memcpy(tail.data(), &value, 8);
    seeds.push_back(Record(2, tail));
  }
  for (uint32_t length : {0u, 8u, 1u << 20, 0xffffffffu}) {
    for (uint32_t kind : {kRecordData, kRecordPadding, 7u}) {
      std::string header(8, '\0');
      std::memcpy(header.data(), &length, 4);
      std::memcpy(header.data() + 4, &kind, 4);
      seeds.push_back(Record(3, header));
    }
  }
  return seeds;
}

std::vector<std::string> Dictionary() {
  // Command field tags (protos/commands.proto) and record kinds.
  return {std::string("\x08\x01", 2),
          std::string("\x12\x00", 2),
          std::string("\x01\x00\x00\x00", 4),
          std::string("\x02\x00\x00\x00", 4),
          std::string(8, '\xff'),
          std::string(8, '\0')};
}

}  // namespace openreg::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace openreg;        // NOLINT(build/namespaces)
  using namespace openreg::fuzz;  // NOLINT(build/namespaces)
  Daemon& d = TheDaemon();
  World world = MakeWorld();
  {
    AllocationScope allocations;
    RunRecords(data, size, world);
    if (AllocationsObservable()) {
      // The worker's per-command arena (64 KiB) and payload copy, protobuf
      // messages of at most one ring record (a byte of wire format parses
      // into a few dozen bytes of message at most), error strings.
      const AllocationStats stats = allocations.Stats();
      const size_t bound = (1 << 20) + 64 * kRingBytes;
      OPENREG_FUZZ_CHECK(
          stats.largest <= bound && stats.peak_live <= bound,
          absl::StrCat("largest allocation ", stats.largest, ", peak ",
                       stats.peak_live, " bytes for ", size, " input bytes"));
    }
  }
  OPENREG_FUZZ_CHECK(GuardsIntact(world),
                     "a command wrote another session's memory");
  OPENREG_FUZZ_CHECK(!ClientMemoryHoldsCanary(world),
                     "another session's memory reached the client");
  world.session->Close();
  world.guard->Close();
  close(world.host_fd);
  for (int device = 0; device < 2; ++device) {
    OPENREG_FUZZ_CHECK(d.devices->arena(device).Stats().allocation_count == 0,
                       "a closed session left device memory allocated");
  }
  return 0;
}
