// IPC memory handles through the runtime API, between this process and a
// second client process (ipc_peer): true sharing, lifetime across the
// exporter's free and the importer's exit, and handles the daemon refuses.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
class Peer {
 public:
  explicit Peer(const IpcMemHandle& handle) {
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
      const std::string hex = absl::BytesToHexString(absl::string_view(
          reinterpret_cast<const char*>(handle.bytes), sizeof(handle.bytes)));
      execl(binary.c_str(), binary.c_str(), hex.c_str(),
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

}  // namespace
}  // namespace openreg
