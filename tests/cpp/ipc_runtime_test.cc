// IPC memory and event handles through the runtime API, between this
// process and a second client process (ipc_peer): true sharing, lifetime
// across the exporter's free and the importer's exit, ordering through an
// interprocess event, and handles the daemon refuses.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openreg/faults.h"
#include "openreg/launch.h"
#include "openreg/runtime.h"
#include "tests/cpp/runtime_test_daemon.h"

namespace openreg {
namespace {

using ::testing::HasSubstr;

std::string PeerBinaryPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir ? srcdir : ".", "/",
                      workspace ? workspace : "__main__",
                      "/tests/cpp/ipc_peer");
}

// A running ipc_peer with pipes to its stdin and from its stdout.
template <typename Handle>
std::string Hex(const Handle& handle) {
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(handle.bytes), sizeof(handle.bytes)));
}

template <typename Handle>
Handle FromHex(const std::string& hex) {
  Handle handle{};
  absl::HexStringToBytes(hex).copy(reinterpret_cast<char*>(handle.bytes),
                                   sizeof(handle.bytes));
  return handle;
}

class Peer {
 public:
  explicit Peer(const IpcMemHandle& handle) : Peer(Hex(handle)) {}
  // `memory_handle_hex`: "-" for none.
  explicit Peer(const std::string& memory_handle_hex) {
    int to_child[2];
    int from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      const std::string binary = PeerBinaryPath();
      execl(binary.c_str(), binary.c_str(), memory_handle_hex.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    input_ = fdopen(to_child[1], "w");
    output_ = fdopen(from_child[0], "r");
  }
  ~Peer() {
    if (input_ != nullptr) fclose(input_);
    if (output_ != nullptr) fclose(output_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  std::string Line() {
    char buffer[4096];
    if (output_ == nullptr ||
        fgets(buffer, sizeof(buffer), output_) == nullptr) {
      return "<eof>";
    }
    std::string line(buffer);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }
  std::string Ask(const std::string& command) {
    fprintf(input_, "%s\n", command.c_str());
    fflush(input_);
    return Line();
  }
  // Kills the peer (a crash) and reaps it.
  void Crash() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* input_ = nullptr;
  FILE* output_ = nullptr;
};

class IpcRuntimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = new SuiteDaemon;
    absl::Status started = daemon_->Start({"--devices=2"});
    ASSERT_TRUE(started.ok()) << started;
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(Shutdown(), Error::kSuccess) << GetLastErrorMessage();
    delete daemon_;
  }

  void* DeviceText(const std::string& text, size_t bytes = 4096) {
    void* pointer = nullptr;
    EXPECT_EQ(Malloc(&pointer, bytes), Error::kSuccess);
    EXPECT_EQ(
        Memcpy(pointer, text.data(), text.size(), MemcpyKind::kHostToDevice),
        Error::kSuccess);
    return pointer;
  }
  std::string HostText(const void* pointer, size_t size) {
    std::string text(size, '\0');
    EXPECT_EQ(Memcpy(text.data(), pointer, size, MemcpyKind::kDeviceToHost),
              Error::kSuccess);
    return text;
  }

  static SuiteDaemon* daemon_;
};

SuiteDaemon* IpcRuntimeTest::daemon_ = nullptr;

TEST_F(IpcRuntimeTest, AnotherProcessReadsAndWritesTheSameMemory) {
  char* base = static_cast<char*>(DeviceText("0123456789abcdef"));
  IpcMemHandle handle;
  // A pointer inside the allocation: the handle keeps the offset.
  ASSERT_EQ(IpcGetMemHandle(&handle, base + 4), Error::kSuccess)
      << GetLastErrorMessage();
  Peer peer(handle);
  ASSERT_EQ(peer.Line(), "opened");
  EXPECT_EQ(peer.Ask("read 4"), absl::BytesToHexString("4567"));
  EXPECT_EQ(peer.Ask("write PEER"), "written");
  EXPECT_EQ(HostText(base, 16), "0123PEER89abcdef");
  EXPECT_EQ(peer.Ask("close"), "closed");
  EXPECT_THAT(peer.Ask("close"), HasSubstr("not opened"));
  EXPECT_EQ(Free(base), Error::kSuccess);
}

TEST_F(IpcRuntimeTest, TheDataOutlivesTheExportersFree) {
  void* base = DeviceText("still here");
  IpcMemHandle handle;
  ASSERT_EQ(IpcGetMemHandle(&handle, base), Error::kSuccess);
  Peer peer(handle);
  ASSERT_EQ(peer.Line(), "opened");
  ASSERT_EQ(Free(base), Error::kSuccess);
  ASSERT_EQ(DeviceSynchronize(), Error::kSuccess);  // the free has run
  EXPECT_EQ(peer.Ask("read 10"), absl::BytesToHexString("still here"));
}

TEST_F(IpcRuntimeTest, ACrashedImporterLeavesTheExportersMemoryIntact) {
  void* base = DeviceText("intact");
  IpcMemHandle handle;
  ASSERT_EQ(IpcGetMemHandle(&handle, base), Error::kSuccess);
  {
    Peer peer(handle);
    ASSERT_EQ(peer.Line(), "opened");
    peer.Crash();
  }
  EXPECT_EQ(HostText(base, 6), "intact");
  EXPECT_EQ(Free(base), Error::kSuccess);
}

TEST_F(IpcRuntimeTest, BadHandlesAreRefusedWithClearErrors) {
  void* base = DeviceText("x");
  IpcMemHandle handle;
  ASSERT_EQ(IpcGetMemHandle(&handle, base), Error::kSuccess);
  void* opened = nullptr;
  // Its own handle.
  EXPECT_EQ(IpcOpenMemHandle(&opened, handle), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("exported the memory"));
  IpcMemHandle forged = handle;
  forged.bytes[33] ^= 0x40;
  EXPECT_EQ(IpcOpenMemHandle(&opened, forged), Error::kInvalidHandle);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("forged"));
  IpcMemHandle garbage{};
  EXPECT_EQ(IpcOpenMemHandle(&opened, garbage), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("not an openreg IPC handle"));
  EXPECT_EQ(IpcGetMemHandle(&handle, reinterpret_cast<void*>(0x1234)),
            Error::kInvalidValue);
  EXPECT_EQ(IpcCloseMemHandle(base), Error::kInvalidValue);
  EXPECT_EQ(Free(base), Error::kSuccess);
  // A handle of freed memory.
  ASSERT_EQ(DeviceSynchronize(), Error::kSuccess);
  Peer peer(handle);
  EXPECT_THAT(peer.Line(), HasSubstr("was freed"));
}

// Arms a fault that holds this process's next copy on the
// device for `seconds`: work another process must wait for.
void DelayNextUpload(double seconds) {
  std::vector<uint32_t> ids;
  ASSERT_EQ(ArmFaultsFromJson(
                absl::StrCat(R"({"faults": [{"hang": {"seconds": )", seconds,
                             R"(}, "trigger": {"kind": "copy"}}]})"),
                &ids),
            Error::kSuccess)
      << GetLastErrorMessage();
}

EventId InterprocessEvent() {
  EventId event = 0;
  EXPECT_EQ(EventCreate(&event, kEventInterprocess | kEventDisableTiming),
            Error::kSuccess)
      << GetLastErrorMessage();
  return event;
}

TEST_F(IpcRuntimeTest, AnotherProcesssStreamWaitsForAnInterprocessEvent) {
  void* base = DeviceText("BEFORE");
  IpcMemHandle memory;
  ASSERT_EQ(IpcGetMemHandle(&memory, base), Error::kSuccess);
  Peer peer(memory);
  ASSERT_EQ(peer.Line(), "opened");
  // The upload is held on the device for 2 s; the event follows it.
  DelayNextUpload(2);
  ASSERT_EQ(MemcpyAsync(base, "AFTER!", 6, MemcpyKind::kHostToDevice),
            Error::kSuccess);
  const EventId event = InterprocessEvent();
  ASSERT_EQ(EventRecord(event), Error::kSuccess) << GetLastErrorMessage();
  IpcEventHandle handle;
  ASSERT_EQ(IpcGetEventHandle(&handle, event), Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(peer.Ask("open_event " + Hex(handle)), "opened_event");
  EXPECT_EQ(peer.Ask("query_event"), "not_ready");
  // Without the wait the peer's read would see BEFORE.
  EXPECT_EQ(peer.Ask("wait_event_then_read 6"),
            absl::BytesToHexString("AFTER!"));
  EXPECT_EQ(peer.Ask("query_event"), "ready");
  EXPECT_EQ(EventDestroy(event), Error::kSuccess);
  EXPECT_EQ(Free(base), Error::kSuccess);
}

TEST_F(IpcRuntimeTest, AnotherProcessWaitsOnTheHostForAnInterprocessEvent) {
  void* base = DeviceText("BEFORE");
  IpcMemHandle memory;
  ASSERT_EQ(IpcGetMemHandle(&memory, base), Error::kSuccess);
  Peer peer(memory);
  ASSERT_EQ(peer.Line(), "opened");
  DelayNextUpload(1);
  ASSERT_EQ(MemcpyAsync(base, "HOSTOK", 6, MemcpyKind::kHostToDevice),
            Error::kSuccess);
  const EventId event = InterprocessEvent();
  ASSERT_EQ(EventRecord(event), Error::kSuccess);
  IpcEventHandle handle;
  ASSERT_EQ(IpcGetEventHandle(&handle, event), Error::kSuccess);
  EXPECT_EQ(peer.Ask("open_event " + Hex(handle)), "opened_event");
  EXPECT_EQ(peer.Ask("sync_event"), "synchronized");
  EXPECT_EQ(peer.Ask("read 6"), absl::BytesToHexString("HOSTOK"));
  // A new record is what later waits see.
  DelayNextUpload(1);
  ASSERT_EQ(MemcpyAsync(base, "AGAIN!", 6, MemcpyKind::kHostToDevice),
            Error::kSuccess);
  ASSERT_EQ(EventRecord(event), Error::kSuccess);
  EXPECT_EQ(peer.Ask("query_event"), "not_ready");
  EXPECT_EQ(peer.Ask("sync_event"), "synchronized");
  EXPECT_EQ(peer.Ask("read 6"), absl::BytesToHexString("AGAIN!"));
  EXPECT_EQ(EventDestroy(event), Error::kSuccess);
  EXPECT_EQ(Free(base), Error::kSuccess);
}

TEST_F(IpcRuntimeTest, AWaitFailsWhenTheExporterEndsBeforeItsRecordedWork) {
  Peer peer("-");
  ASSERT_EQ(peer.Line(), "opened");
  const std::string hex = peer.Ask("export_pending_event");
  ASSERT_EQ(hex.size(), 2 * kIpcHandleSize) << hex;
  EventId event = 0;
  ASSERT_EQ(IpcOpenEventHandle(&event, FromHex<IpcEventHandle>(hex)),
            Error::kSuccess)
      << GetLastErrorMessage();
  EXPECT_EQ(EventQuery(event), Error::kNotReady);
  StreamId stream = 0;
  ASSERT_EQ(StreamCreate(&stream), Error::kSuccess);
  ASSERT_EQ(StreamWaitEvent(stream, event), Error::kSuccess);
  peer.Crash();
  EXPECT_EQ(EventSynchronize(event), Error::kInvalidHandle);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("ended before the work"));
  // The stream that waited on the device reports the same.
  EXPECT_EQ(StreamSynchronize(stream), Error::kInvalidHandle);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("ended before the work"));
  EXPECT_EQ(EventDestroy(event), Error::kSuccess);
  // A handle of an ended exporter no longer opens.
  EXPECT_EQ(IpcOpenEventHandle(&event, FromHex<IpcEventHandle>(hex)),
            Error::kInvalidHandle);
  StreamDestroy(stream);
}

TEST_F(IpcRuntimeTest, BadEventHandlesAreRefusedWithClearErrors) {
  EventId plain = 0;
  ASSERT_EQ(EventCreate(&plain, kEventDisableTiming), Error::kSuccess);
  IpcEventHandle handle;
  EXPECT_EQ(IpcGetEventHandle(&handle, plain), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(),
              HasSubstr("not created as an interprocess event"));
  EventId timed = 0;
  EXPECT_EQ(EventCreate(&timed, kEventInterprocess), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("timing disabled"));

  const EventId event = InterprocessEvent();
  ASSERT_EQ(IpcGetEventHandle(&handle, event), Error::kSuccess);
  EventId opened = 0;
  // Its own handle.
  EXPECT_EQ(IpcOpenEventHandle(&opened, handle), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("exported the event"));
  IpcEventHandle forged = handle;
  forged.bytes[30] ^= 0x01;
  EXPECT_EQ(IpcOpenEventHandle(&opened, forged), Error::kInvalidHandle);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("forged"));
  IpcEventHandle garbage{};
  EXPECT_EQ(IpcOpenEventHandle(&opened, garbage), Error::kInvalidValue);
  // A memory handle is not an event handle.
  void* base = DeviceText("m");
  IpcMemHandle memory;
  ASSERT_EQ(IpcGetMemHandle(&memory, base), Error::kSuccess);
  IpcEventHandle wrong_kind;
  std::memcpy(wrong_kind.bytes, memory.bytes, kIpcHandleSize);
  EXPECT_EQ(IpcOpenEventHandle(&opened, wrong_kind), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("memory handle"));

  Peer peer("-");
  ASSERT_EQ(peer.Line(), "opened");
  ASSERT_EQ(peer.Ask("open_event " + Hex(handle)), "opened_event");
  // Used after close: the peer's event is gone with EventDestroy; here,
  // a destroyed exporter's event no longer opens.
  ASSERT_EQ(EventDestroy(event), Error::kSuccess);
  EXPECT_THAT(peer.Ask("open_event " + Hex(handle)),
              HasSubstr("no such event export"));
  // The event the peer opened before is done (nothing pending).
  EXPECT_EQ(peer.Ask("query_event"), "ready");
  EXPECT_EQ(EventDestroy(plain), Error::kSuccess);
  EXPECT_EQ(Free(base), Error::kSuccess);
}

TEST_F(IpcRuntimeTest, AnImportedEventCannotBeRecordedOrUsedAfterDestroy) {
  Peer peer("-");
  ASSERT_EQ(peer.Line(), "opened");
  const std::string hex = peer.Ask("export_pending_event");
  ASSERT_EQ(hex.size(), 2 * kIpcHandleSize) << hex;
  EventId event = 0;
  ASSERT_EQ(IpcOpenEventHandle(&event, FromHex<IpcEventHandle>(hex)),
            Error::kSuccess);
  EXPECT_EQ(EventRecord(event), Error::kInvalidValue);
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("cannot be recorded here"));
  ASSERT_EQ(EventDestroy(event), Error::kSuccess);
  EXPECT_EQ(EventQuery(event), Error::kInvalidHandle);
  EXPECT_EQ(EventSynchronize(event), Error::kInvalidHandle);
}

}  // namespace
}  // namespace openreg
