// libtorch ships its own protobuf (statically linked, mostly hidden) and
// protobuf headers of another version. This test loads libtorch, the system
// protobuf and gRPC, and the whole openreg client stack into one process and
// exercises each, so that a symbol clash or header mix-up fails here rather
// than as a crash in a user's process.
#include <ATen/ATen.h>
#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>

#include <string>

#include "gtest/gtest.h"
#include "openreg/runtime.h"
#include "protos/commands.pb.h"
#include "protos/control.grpc.pb.h"

namespace openreg {
namespace {

TEST(OneProcessTest, SystemProtobufIsTheOneInUse) {
  // Headers and library agree (this aborts on a mismatch).
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  EXPECT_EQ(GOOGLE_PROTOBUF_VERSION / 1000000, 3);
  EXPECT_EQ(GOOGLE_PROTOBUF_VERSION / 1000 % 1000, 21);
}

TEST(OneProcessTest, ProtobufRoundTripNextToLibtorch) {
  proto::Command command;
  command.set_sequence(42);
  proto::LaunchOp* launch = command.mutable_launch();
  launch->set_name("aten::add");
  launch->set_overload("Tensor");
  launch->add_arguments()->mutable_tensor()->add_sizes(3);
  std::string bytes;
  ASSERT_TRUE(command.SerializeToString(&bytes));
  proto::Command parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.sequence(), 42u);
  EXPECT_EQ(parsed.launch().name(), "aten::add");
  EXPECT_EQ(parsed.launch().arguments(0).tensor().sizes(0), 3);

  const at::Tensor sum = at::ones({3}) + at::ones({3});
  EXPECT_EQ(sum.sum().item<float>(), 6.0f);
}

TEST(OneProcessTest, GrpcChannelNextToLibtorch) {
  auto channel = grpc::CreateChannel("unix:/nonexistent/openreg-test.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = proto::DeviceDaemon::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(200));
  proto::HandshakeRequest request;
  proto::HandshakeReply reply;
  const grpc::Status status = stub->Handshake(&context, request, &reply);
  EXPECT_FALSE(status.ok());  // nobody listens: a clean error, no crash
}

TEST(OneProcessTest, RuntimeClientLinksWithoutConnecting) {
  EXPECT_FALSE(IsConnected());
  EXPECT_FALSE(DefaultSocketPath().empty());
}

}  // namespace
}  // namespace openreg
