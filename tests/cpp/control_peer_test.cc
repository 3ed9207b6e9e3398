// Control RPCs answer only the daemon's uid (issue 13, finding 2): with
// the sockets' permissions opened up, another local user gets
// PERMISSION_DENIED from every RPC — GetStats and the other session-less
// ones included — and from the attach socket, while the daemon's own user
// is served as before. The runtime client, in turn, refuses a daemon of
// another uid.
//
// gRPC runs only in forked children (RunInChild): this process forks, so it
// must not start gRPC itself.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/session_layout.h"
#include "data_plane/unix_socket.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "openreg/runtime.h"
#include "protos/control.grpc.pb.h"
#include "tests/cpp/runtime_test_daemon.h"
#include "tests/cpp/second_user.h"

namespace openreg {
namespace {

using ::testing::HasSubstr;

// "<method> <grpc code> <message>" for each call.
std::string CallEveryKind(const std::string& socket) {
  auto stub = proto::DeviceDaemon::NewStub(grpc::CreateChannel(
      "unix:" + socket, grpc::InsecureChannelCredentials()));
  std::string lines;
  auto record = [&](const char* method, const grpc::Status& status) {
    absl::StrAppend(&lines, method, " ", static_cast<int>(status.error_code()),
                    " ", status.error_message(), "\n");
  };
  {
    grpc::ClientContext context;
    proto::GetStatsReply reply;
    record("GetStats", stub->GetStats(&context, {}, &reply));
  }
  {
    grpc::ClientContext context;
    proto::HandshakeRequest request;
    request.set_protocol_version(kProtocolVersion);
    proto::HandshakeReply reply;
    record("Handshake", stub->Handshake(&context, request, &reply));
  }
  {
    grpc::ClientContext context;
    proto::ListFaultsReply reply;
    record("ListFaults", stub->ListFaults(&context, {}, &reply));
  }
  {
    // Daemon-wide faults would hit every client of the daemon.
    grpc::ClientContext context;
    proto::ArmFaultsReply reply;
    record("ArmFaults", stub->ArmFaults(&context, {}, &reply));
  }
  {
    grpc::ClientContext context;
    proto::ResetDeviceReply reply;
    record("ResetDevice", stub->ResetDevice(&context, {}, &reply));
  }
  {
    grpc::ClientContext context;
    proto::AllocateRequest request;
    request.mutable_session()->set_session_id(1);
    request.set_size(16);
    proto::AllocateReply reply;
    record("Allocate", stub->Allocate(&context, request, &reply));
  }
  return lines;
}

// The attach socket's answer to a complete hello: "<error code> <message>".
std::string AttachAnswer(const std::string& socket) {
  absl::StatusOr<int> fd = ConnectUnix(AttachSocketPath(socket));
  if (!fd.ok()) return std::string(fd.status().message());
  AttachHello hello{};
  hello.magic = kAttachMagic;
  hello.protocol_version = kProtocolVersion;
  SendMessage(*fd, &hello, sizeof(hello)).IgnoreError();
  AttachWelcome welcome{};
  int segment_fd = -1;
  absl::Status received = ReceiveMessage(*fd, &welcome, sizeof(welcome),
                                         absl::Seconds(10), &segment_fd);
  close(*fd);
  if (segment_fd >= 0) close(segment_fd);
  if (!received.ok()) return std::string(received.message());
  return absl::StrCat(
      welcome.error_code, " ",
      std::string(welcome.message,
                  strnlen(welcome.message, sizeof(welcome.message))));
}

class ControlPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why_not = WhyNoSecondUser();
    if (!why_not.empty()) GTEST_SKIP() << why_not;
    absl::StatusOr<std::unique_ptr<SecondUser>> user = SecondUser::Create();
    ASSERT_TRUE(user.ok()) << user.status();
    other_ = *std::move(user);
    directory_ = MakeSocketDirectory();
    ASSERT_FALSE(directory_.empty());
    socket_ = directory_ + "/daemon.sock";
    absl::Status started = daemon_.Start(
        socket_,
        {"--devices=2", "--memory_per_device=16MiB", "--log_level=info"});
    ASSERT_TRUE(started.ok()) << started;
    // Opened up, as an operator might: the folder stays the daemon user's
    // and unwritable by others (the daemon would refuse it otherwise).
    ASSERT_EQ(chmod(directory_.c_str(), 0711), 0);
    ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);
    ASSERT_EQ(chmod(AttachSocketPath(socket_).c_str(), 0666), 0);
  }
  void TearDown() override {
    if (daemon_.running()) {
      EXPECT_EQ(daemon_.Stop(), 0) << daemon_.Log();
    }
    if (!directory_.empty()) RemoveSocketDirectory(directory_);
    other_.reset();
  }

  std::unique_ptr<SecondUser> other_;
  std::string directory_;
  std::string socket_;
  TestDaemon daemon_;
};

TEST_F(ControlPeerTest, EveryRpcRefusesAnotherUid) {
  const std::string answers =
      RunInChild(other_.get(), [&] { return CallEveryKind(socket_); });
  const std::string refusal = absl::StrCat(
      static_cast<int>(grpc::StatusCode::PERMISSION_DENIED), " uid ",
      other_->uid(), " may not use the openreg-daemon of uid ", getuid(),
      " on ", socket_,
      ": each user runs their own daemon; start yours with "
      "`openreg-daemon --socket=PATH`");
  for (const char* method : {"GetStats", "Handshake", "ListFaults", "ArmFaults",
                             "ResetDevice", "Allocate"}) {
    EXPECT_THAT(answers, HasSubstr(absl::StrCat(method, " ", refusal)))
        << answers;
  }
  EXPECT_THAT(
      daemon_.Log(),
      HasSubstr(absl::StrCat("refusing control calls of uid ", other_->uid())));

  // The attach socket refuses as well, with the same words.
  const std::string attach =
      RunInChild(other_.get(), [&] { return AttachAnswer(socket_); });
  EXPECT_THAT(attach, HasSubstr(absl::StrCat(
                          proto::PERMISSION_DENIED, " uid ", other_->uid(),
                          " may not use the openreg-daemon of uid ")))
      << attach;

  // The daemon's own user is served, on the same socket.
  const std::string own =
      RunInChild(nullptr, [&] { return CallEveryKind(socket_); });
  EXPECT_THAT(own, HasSubstr("GetStats 0 \n")) << own;
  EXPECT_THAT(own, HasSubstr("Handshake 0 \n")) << own;
  EXPECT_THAT(own, HasSubstr("ListFaults 0 \n")) << own;
  EXPECT_THAT(RunInChild(nullptr, [&] { return AttachAnswer(socket_); }),
              HasSubstr("0 "));
  EXPECT_TRUE(daemon_.running());
}

TEST_F(ControlPeerTest, TheRuntimeClientRefusesADaemonOfAnotherUid) {
  // From the other user's side: the socket it was pointed at is served by
  // a daemon of uid 0 — someone else's, or an impostor's.
  const std::string answer = RunInChild(other_.get(), [&] {
    setenv("OPENREG_DAEMON_SOCKET", socket_.c_str(), 1);
    setenv("OPENREG_AUTOSPAWN", "0", 1);
    const Error error = Init();
    std::string text =
        absl::StrCat(static_cast<int>(error), " ", GetLastErrorMessage());
    Shutdown();
    return text;
  });
  EXPECT_THAT(answer, HasSubstr(absl::StrCat(
                          static_cast<int>(Error::kPermissionDenied),
                          " openreg: ", socket_, " is served by uid ", getuid(),
                          " (pid ", daemon_.pid(), "), not by this user (uid ",
                          other_->uid(), ")")))
      << answer;
  EXPECT_THAT(answer, HasSubstr("OPENREG_DAEMON_SOCKET")) << answer;
}

}  // namespace
}  // namespace openreg
