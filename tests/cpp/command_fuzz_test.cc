// Hostile input on the data plane: random bytes, random commands and random
// op launches (real ATen ops with random arguments and tensor views) must
// never crash the daemon or stall a stream; every command completes and
// the stream keeps working afterwards. The seed is fixed so that a failure
// reproduces; OPENREG_FUZZ_SEED and OPENREG_FUZZ_ITERATIONS explore more.
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data_plane/device_address.h"
#include "device_daemon/command_executor.h"
#include "device_daemon/devices.h"
#include "device_daemon/op_runner.h"
#include "device_daemon/session.h"
#include "gtest/gtest.h"
#include "tests/cpp/stream_driver.h"

namespace openreg {
namespace {

// Real ops with their overloads. Mostly cheap element-wise and shape ops:
// the point is argument handling, not kernel coverage.
const char* const kOps[][2] = {
    {"aten::add", "Tensor"},
    {"aten::add_", "Tensor"},
    {"aten::add", "Scalar"},
    {"aten::mul", "Tensor"},
    {"aten::div", "Tensor_mode"},
    {"aten::neg", ""},
    {"aten::abs_", ""},
    {"aten::sum", "dim_IntList"},
    {"aten::mean", "dim"},
    {"aten::mm", ""},
    {"aten::bmm", ""},
    {"aten::cat", ""},
    {"aten::stack", ""},
    {"aten::index", "Tensor"},
    {"aten::index_put_", ""},
    {"aten::view", ""},
    {"aten::reshape", ""},
    {"aten::transpose", "int"},
    {"aten::permute", ""},
    {"aten::expand", ""},
    {"aten::as_strided", ""},
    {"aten::as_strided_", ""},
    {"aten::narrow", ""},
    {"aten::select", "int"},
    {"aten::copy_", ""},
    {"aten::fill_", "Scalar"},
    {"aten::zero_", ""},
    {"aten::ones", ""},
    {"aten::empty", "memory_format"},
    {"aten::arange", "start"},
    {"aten::where", "self"},
    {"aten::clamp", ""},
    {"aten::max", "dim"},
    {"aten::sort", ""},
    {"aten::topk", ""},
    {"aten::gather", ""},
    {"aten::scatter", "src"},
    {"aten::masked_fill", "Scalar"},
    {"aten::_local_scalar_dense", ""},
    {"aten::embedding", ""},
    {"aten::softmax", "int"},
    {"aten::unfold", ""},
    {"aten::repeat", ""},
    {"aten::pow", "Tensor_Scalar"},
    {"aten::cumsum", ""},
    {"aten::flip", ""},
    {"aten::roll", ""},
    {"aten::tril", ""},
    {"aten::resize_", ""},
    {"aten::set_", "source_Tensor"},
    {"aten::split", "Tensor"},
    {"aten::unbind", "int"},
    {"aten::nonzero", ""},
    {"aten::randperm", ""},
    {"aten::no_such_op", ""},
    {"aten::add", "no_such_overload"},
};

class Fuzzer {
 public:
  Fuzzer(uint32_t seed, std::vector<uint64_t> buffers, uint64_t buffer_bytes)
      : random_(seed),
        buffers_(std::move(buffers)),
        buffer_bytes_(buffer_bytes) {}

  int64_t SmallInt() {
    return static_cast<int64_t>(random_() % 14) - 3;  // -3 .. 10
  }

  uint64_t Address() {
    switch (random_() % 8) {
      case 0:
        return random_();  // garbage
      case 1:
        return MakeDeviceAddress(random_() % 3, random_() % (1 << 20));
      default:
        return buffers_[random_() % buffers_.size()] +
               (random_() % 4) * (random_() % 64);
    }
  }

  proto::TensorRef Tensor() {
    proto::TensorRef tensor;
    tensor.set_address(Address());
    const int dims = static_cast<int>(random_() % 4);
    int64_t stride = 1;
    for (int d = 0; d < dims; ++d) {
      tensor.add_sizes(random_() % 10 == 0
                           ? SmallInt()
                           : 1 + static_cast<int64_t>(random_() % 5));
    }
    std::vector<int64_t> strides(dims);
    for (int d = dims - 1; d >= 0; --d) {
      strides[d] = random_() % 8 == 0 ? SmallInt() : stride;
      stride *= std::max<int64_t>(tensor.sizes(d), 1);
    }
    for (int64_t s : strides) tensor.add_strides(s);
    if (random_() % 20 == 0) tensor.add_strides(1);  // mismatched rank
    static constexpr int32_t kDtypes[] = {6, 6,  6, 4,  3,  11, 7, 1,
                                          5, 15, 9, 12, 44, 99, -1};
    tensor.set_dtype(kDtypes[random_() % std::size(kDtypes)]);
    tensor.set_device(random_() % 10 == 0 ? static_cast<int32_t>(random_() % 4)
                                          : DeviceOfAddress(tensor.address()));
    return tensor;
  }

  proto::Scalar Scalar() {
    proto::Scalar scalar;
    switch (random_() % 4) {
      case 0:
        scalar.set_i(SmallInt());
        break;
      case 1:
        scalar.set_d(static_cast<double>(SmallInt()) / 3);
        break;
      case 2:
        scalar.set_b(random_() % 2);
        break;
      default:
        scalar.mutable_c()->set_real(1);
        scalar.mutable_c()->set_imag(-1);
    }
    return scalar;
  }

  proto::Argument Argument(int depth = 0) {
    proto::Argument argument;
    switch (random_() % (depth == 0 ? 16 : 4)) {
      case 0:
      case 1:
      case 2:
        *argument.mutable_tensor() = Tensor();
        break;
      case 3:
        argument.set_none(true);
        break;
      case 4:
      case 5:
        argument.set_int_value(SmallInt());
        break;
      case 6:
        argument.set_double_value(static_cast<double>(SmallInt()) * 0.5);
        break;
      case 7:
        argument.set_bool_value(random_() % 2);
        break;
      case 8:
        *argument.mutable_scalar() = Scalar();
        break;
      case 9:
        for (int i = random_() % 4; i > 0; --i) {
          argument.mutable_int_list()->add_values(SmallInt());
        }
        break;
      case 10:
        for (int i = 1 + random_() % 3; i > 0; --i) {
          *argument.mutable_tensor_list()->add_values() = Argument(depth + 1);
        }
        break;
      case 11: {
        proto::HostTensor* host = argument.mutable_host_tensor();
        host->set_dtype(random_() % 2 ? 6 : 7);
        const int bytes =
            (host->dtype() == 6 ? 4 : 8) * (random_() % 5 == 0 ? 2 : 1);
        host->set_data(std::string(bytes, '\1'));
        break;
      }
      case 12:
        argument.set_device(static_cast<int32_t>(random_() % 4) - 1);
        break;
      case 13:
        argument.set_string_value(random_() % 2 ? "floor" : "bogus");
        break;
      case 14:
        for (int i = random_() % 3; i > 0; --i) {
          argument.mutable_bool_list()->add_values(random_() % 2);
        }
        break;
      default:
        for (int i = random_() % 3; i > 0; --i) {
          *argument.mutable_scalar_list()->add_values() = Scalar();
        }
    }
    return argument;
  }

  proto::Command Launch() {
    proto::Command command;
    proto::LaunchOp* launch = command.mutable_launch();
    const auto& op = kOps[random_() % std::size(kOps)];
    launch->set_name(op[0]);
    launch->set_overload(op[1]);
    for (int i = random_() % 5; i > 0; --i) {
      *launch->add_arguments() = Argument();
    }
    if (random_() % 3 == 0) {
      launch->set_synchronous(true);
    } else {
      for (int i = random_() % 3; i > 0; --i) *launch->add_outputs() = Tensor();
    }
    return command;
  }

  proto::Command Other() {
    proto::Command command;
    const uint64_t size = random_() % 3 == 0 ? random_() : random_() % 5000;
    switch (random_() % 7) {
      case 0:
        command.mutable_h2d()->set_dst(Address());
        command.mutable_h2d()->set_staging_offset(random_() % (2 << 20));
        command.mutable_h2d()->set_size(size);
        break;
      case 1:
        command.mutable_d2h()->set_src(Address());
        command.mutable_d2h()->set_staging_offset(random_() % (2 << 20));
        command.mutable_d2h()->set_size(size);
        break;
      case 2:
        command.mutable_d2d()->set_src(Address());
        command.mutable_d2d()->set_dst(Address());
        command.mutable_d2d()->set_size(size);
        break;
      case 3:
        command.mutable_memset()->set_dst(Address());
        command.mutable_memset()->set_value(random_());
        command.mutable_memset()->set_size(size);
        break;
      case 4:
        command.mutable_record_event()->set_event_slot(random_() % 20);
        break;
      case 5:
        // Only waits that can finish: on itself (past, or future, which
        // is rejected) or on stream 1, which is idle, for sequence 0.
        command.mutable_wait_stream()->set_stream_slot(random_() % 2);
        command.mutable_wait_stream()->set_sequence(
            command.wait_stream().stream_slot() == 0 ? random_() % 3 : 0);
        break;
      default:
        break;  // no body
    }
    return command;
  }

  std::string Garbage() {
    std::string bytes(random_() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(random_());
    return bytes;
  }

  uint32_t Next() { return random_(); }

 private:
  std::mt19937 random_;
  std::vector<uint64_t> buffers_;
  uint64_t buffer_bytes_;
};

uint32_t EnvOr(const char* name, uint32_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? static_cast<uint32_t>(std::atoll(value)) : fallback;
}

TEST(CommandFuzzTest, RandomCommandsNeverCrashOrStall) {
  std::unique_ptr<Devices> devices = *Devices::Create(2, 64 << 20);
  OpRunner op_runner;
  CommandExecutor executor(devices.get(), &op_runner);
  SessionLimits limits;
  limits.max_streams = 4;
  limits.max_events = 16;
  limits.ring_bytes = 64 * 1024;
  limits.reply_bytes = 64 * 1024;
  limits.staging_bytes = 1 << 20;
  SessionIdentity identity;
  identity.id = 1;
  identity.peer = PeerCredentials{getpid(), getuid(), getgid()};
  std::unique_ptr<Session> session =
      *Session::Create(identity, devices.get(), &executor, limits);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(session->CreateEvent(0, false).ok());

  constexpr uint64_t kBufferBytes = 256;
  std::vector<uint64_t> buffers;
  for (int i = 0; i < 6; ++i) {
    buffers.push_back(*session->Allocate(i % 2, kBufferBytes));
  }
  const uint32_t seed = EnvOr("OPENREG_FUZZ_SEED", 20240601);
  const uint32_t iterations = EnvOr("OPENREG_FUZZ_ITERATIONS", 1500);
  Fuzzer fuzzer(seed, buffers, kBufferBytes);
  StreamDriver stream(session->stream_slot(0), session->ring_buffer(0),
                      limits.ring_bytes);
  int failures = 0;
  for (uint32_t i = 0; i < iterations; ++i) {
    uint64_t sequence;
    const uint32_t kind = fuzzer.Next() % 10;
    if (kind == 0) {
      sequence = stream.SubmitRaw(fuzzer.Garbage());
    } else if (kind < 7) {
      sequence = stream.Submit(fuzzer.Launch());
    } else {
      sequence = stream.Submit(fuzzer.Other());
    }
    ASSERT_TRUE(stream.WaitFor(sequence, absl::Seconds(60)))
        << "command " << i << " (seed " << seed << ") did not complete";
    if (stream.TakeError().has_value()) ++failures;
    // Results of synchronous launches belong to the session: free them so
    // the device does not fill up.
    // (Their addresses are in the reply; the table tracks them anyway.)
  }
  EXPECT_GT(failures, 0);  // the fuzzer does produce bad input
  EXPECT_EQ(session->stream_slot(0)->state.load(),
            static_cast<uint32_t>(StreamState::kActive));

  // Still fully functional.
  proto::Command fill;
  fill.mutable_memset()->set_dst(buffers[0]);
  fill.mutable_memset()->set_value(7);
  fill.mutable_memset()->set_size(kBufferBytes);
  EXPECT_EQ(stream.Run(fill), std::nullopt);
  session->Close();
  EXPECT_EQ(devices->arena(0).Stats().allocation_count, 0u);
  EXPECT_EQ(devices->arena(1).Stats().allocation_count, 0u);
}

}  // namespace
}  // namespace openreg
