// The daemon's resource limits (issue 13, finding 5), against the real
// daemon binary: sessions per process and per user, host regions the
// daemon never populates beyond what a copy touches, and a cap on the host
// memory one kernel may hold (a launch with a bogus output shape cannot
// make the daemon allocate gigabytes before the mismatch is reported).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/session_layout.h"
#include "data_plane/unix_socket.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "openreg/launch.h"
#include "openreg/runtime.h"
#include "protos/control.grpc.pb.h"
#include "protos/errors.pb.h"
#include "tests/cpp/runtime_test_daemon.h"

namespace openreg {
namespace {

using ::testing::HasSubstr;

// A field of /proc/PID/status in KiB ("VmHWM", "RssShmem"), -1 if absent.
int64_t StatusKib(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    int64_t kib = -1;
    return absl::SimpleAtoi(digits, &kib) ? kib : -1;
  }
  return -1;
}

// A raw attach from this process: the welcome (error code, session id and
// token) and the open connection (the session lives while it is open).
struct RawSession {
  AttachWelcome welcome{};
  int connection = -1;
  ~RawSession() {
    if (connection >= 0) close(connection);
  }
};

std::unique_ptr<RawSession> AttachRaw(const std::string& socket) {
  auto session = std::make_unique<RawSession>();
  absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket));
  if (!fd.ok()) return session;
  session->connection = *fd;
  AttachHello hello{};
  hello.magic = kAttachMagic;
  hello.protocol_version = kProtocolVersion;
  std::strncpy(hello.client_name, "resource_limits_test",
               sizeof(hello.client_name) - 1);
  if (!SendMessage(*fd, &hello, sizeof(hello)).ok()) return session;
  int segment_fd = -1;
  if (!ReceiveMessage(*fd, &session->welcome, sizeof(session->welcome),
                      absl::Seconds(10), &segment_fd)
           .ok()) {
    session->welcome.error_code = -1;
  }
  if (segment_fd >= 0) close(segment_fd);
  return session;
}

class ResourceLimitsTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& flags) {
    directory_ = MakeSocketDirectory();
    ASSERT_FALSE(directory_.empty());
    socket_ = directory_ + "/daemon.sock";
    std::vector<std::string> all = {"--devices=1"};
    all.insert(all.end(), flags.begin(), flags.end());
    absl::Status started = daemon_.Start(socket_, all);
    ASSERT_TRUE(started.ok()) << started;
    UseSocket(socket_);
  }
  void TearDown() override {
    Shutdown();
    if (daemon_.running()) {
      EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Log();
    }
    RemoveSocketDirectory(directory_);
  }

  std::string directory_;
  std::string socket_;
  TestDaemon daemon_;
};

TEST_F(ResourceLimitsTest, AProcessGetsAtMostItsQuotaOfSessions) {
  Start({"--memory_per_device=16MiB", "--max_sessions_per_process=4"});
  std::vector<std::unique_ptr<RawSession>> sessions;
  for (int i = 0; i < 4; ++i) {
    sessions.push_back(AttachRaw(socket_));
    ASSERT_EQ(sessions.back()->welcome.error_code, 0)
        << sessions.back()->welcome.message;
  }
  std::unique_ptr<RawSession> refused = AttachRaw(socket_);
  EXPECT_EQ(refused->welcome.error_code, proto::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused->welcome.message,
              HasSubstr("already has 4 sessions attached"));
  EXPECT_THAT(refused->welcome.message, HasSubstr("max_sessions_per_process"));
  // A session that ends gives its place back.
  sessions.pop_back();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::unique_ptr<RawSession> again;
  do {
    again = AttachRaw(socket_);
  } while (again->welcome.error_code != 0 &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(again->welcome.error_code, 0) << again->welcome.message;
}

TEST_F(ResourceLimitsTest, AUserGetsAtMostItsQuotaOfSessions) {
  Start({"--memory_per_device=16MiB", "--max_sessions_per_process=0",
         "--max_sessions_per_uid=3"});
  std::vector<std::unique_ptr<RawSession>> sessions;
  for (int i = 0; i < 3; ++i) {
    sessions.push_back(AttachRaw(socket_));
    ASSERT_EQ(sessions.back()->welcome.error_code, 0);
  }
  std::unique_ptr<RawSession> refused = AttachRaw(socket_);
  EXPECT_EQ(refused->welcome.error_code, proto::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused->welcome.message,
              HasSubstr(absl::StrCat("uid ", getuid(), " already has 3")));
}

TEST_F(ResourceLimitsTest, ASparseHostRegionIsNotPopulatedByTheDaemon) {
  Start({"--memory_per_device=16MiB"});
  std::unique_ptr<RawSession> session = AttachRaw(socket_);
  ASSERT_EQ(session->welcome.error_code, 0) << session->welcome.message;
  // 1 GiB of holes: the client wrote nothing.
  const int memfd =
      memfd_create("sparse-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(memfd, 0);
  constexpr uint64_t kSize = 1ull << 30;
  ASSERT_EQ(ftruncate(memfd, kSize), 0);
  ASSERT_EQ(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  const int64_t before = StatusKib(daemon_.pid(), "RssShmem");
  ASSERT_GE(before, 0);
  auto stub = proto::DeviceDaemon::NewStub(grpc::CreateChannel(
      "unix:" + socket_, grpc::InsecureChannelCredentials()));
  proto::RegisterHostRegionRequest request;
  request.mutable_session()->set_session_id(session->welcome.session_id);
  request.mutable_session()->set_token(session->welcome.token);
  request.set_client_fd(memfd);
  request.set_size(kSize);
  proto::RegisterHostRegionReply reply;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->RegisterHostRegion(&context, request, &reply).ok());
  ASSERT_EQ(reply.status().code(), proto::OK) << reply.status().message();
  // Mapped, not populated: the daemon's shared memory grew by far less
  // than the region (it would be the whole GiB with MAP_POPULATE).
  const int64_t after = StatusKib(daemon_.pid(), "RssShmem");
  EXPECT_LT(after - before, 64 * 1024) << before << " KiB -> " << after;
  close(memfd);
}

TEST_F(ResourceLimitsTest, AKernelsTemporariesAreCappedAtTheDevicesSize) {
  Start({"--memory_per_device=64MiB"});
  void* input = nullptr;
  void* output = nullptr;
  ASSERT_EQ(Malloc(&input, 16), Error::kSuccess) << GetLastErrorMessage();
  ASSERT_EQ(Malloc(&output, 16), Error::kSuccess);
  ASSERT_EQ(MemsetAsync(input, 0, 16), Error::kSuccess);
  const int64_t peak_before = StatusKib(daemon_.pid(), "VmHWM");
  // aten::repeat of 4 floats 2^27 times is 2 GiB; the launch claims an
  // output of 4 elements. The daemon must refuse the 2 GiB result before
  // allocating it, not after.
  auto vector_ref = [](void* pointer) {
    proto::TensorRef tensor;
    tensor.set_address(reinterpret_cast<uint64_t>(pointer));
    tensor.add_sizes(4);
    tensor.add_strides(1);
    tensor.set_dtype(6);  // c10::ScalarType::Float
    tensor.set_device(0);
    return tensor;
  };
  proto::LaunchOp op;
  op.set_name("aten::repeat");
  *op.add_arguments()->mutable_tensor() = vector_ref(input);
  op.add_arguments()->mutable_int_list()->add_values(int64_t{1} << 27);
  *op.add_outputs() = vector_ref(output);
  ASSERT_EQ(LaunchOp(op), Error::kSuccess) << GetLastErrorMessage();
  EXPECT_EQ(StreamSynchronize(kDefaultStream), Error::kOutOfMemory);
  EXPECT_THAT(GetLastErrorMessage(),
              HasSubstr("of temporary memory inside openreg-daemon"));
  EXPECT_THAT(GetLastErrorMessage(), HasSubstr("kernel_workspace_limit"));
  const int64_t peak_after = StatusKib(daemon_.pid(), "VmHWM");
  EXPECT_LT(peak_after - peak_before, 256 * 1024)
      << "peak resident set " << peak_before << " KiB -> " << peak_after;
  // The stream goes on.
  ASSERT_EQ(MemsetAsync(output, 0, 16), Error::kSuccess);
  EXPECT_EQ(StreamSynchronize(kDefaultStream), Error::kSuccess);
  EXPECT_EQ(Free(input), Error::kSuccess);
  EXPECT_EQ(Free(output), Error::kSuccess);
}

}  // namespace
}  // namespace openreg
