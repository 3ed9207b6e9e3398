// Hostile input on the data plane: random bytes, random commands and random
// op launches (real ATen ops with random arguments and tensor views) must
// never crash the daemon or stall a stream; every command completes and
// the stream keeps working afterwards. The seed is fixed so that a failure
// reproduces; OPENREG_FUZZ_SEED and OPENREG_FUZZ_ITERATIONS explore more.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data_plane/device_address.h"
#include "device_daemon/aten_op_runner.h"
#include "device_daemon/command_executor.h"
#include "device_daemon/devices.h"
#include "device_daemon/session.h"
#include "gtest/gtest.h"
#include "tests/cpp/stream_driver.h"

namespace openreg::daemon {
namespace {

// Real ops with their overloads and an argument signature the fuzzer
// mostly follows (then mutates): T float tensor, I int64 tensor, B bool
// tensor, A tensor list, O optional-tensor list of int64 tensors, s Scalar,
// i int, b bool, L int list, d dtype, m memory format, D device, N None,
// r rounding-mode string. A trailing '!' marks in-place ops (output = self).
struct OpSpec {
  const char* name;
  const char* overload;
  const char* signature;
};

constexpr OpSpec kOps[] = {
    {"aten::add", "Tensor", "TTs"},
    {"aten::add_", "Tensor", "TT!"},
    {"aten::add", "Scalar", "Ts"},
    {"aten::mul", "Tensor", "TT"},
    {"aten::div", "Tensor_mode", "TTr"},
    {"aten::neg", "", "T"},
    {"aten::abs_", "", "T!"},
    {"aten::sum", "dim_IntList", "TLb"},
    {"aten::mean", "dim", "TLb"},
    {"aten::mm", "", "TT"},
    {"aten::bmm", "", "TT"},
    {"aten::cat", "", "Ai"},
    {"aten::stack", "", "Ai"},
    {"aten::index", "Tensor", "TO"},
    {"aten::index_put_", "", "TOT!"},
    {"aten::view", "", "TL"},
    {"aten::reshape", "", "TL"},
    {"aten::transpose", "int", "Tii"},
    {"aten::permute", "", "TL"},
    {"aten::expand", "", "TL"},
    {"aten::as_strided", "", "TLLi"},
    {"aten::as_strided_", "", "TLLi!"},
    {"aten::narrow", "", "Tiii"},
    {"aten::select", "int", "Tii"},
    {"aten::copy_", "", "TT!"},
    {"aten::fill_", "Scalar", "Ts!"},
    {"aten::zero_", "", "T!"},
    {"aten::ones", "", "LdNDN"},
    {"aten::empty", "memory_format", "LdNDNm"},
    {"aten::arange", "start", "ssdNDN"},
    {"aten::where", "self", "BTT"},
    {"aten::clamp", "", "Tss"},
    {"aten::max", "dim", "Tib"},
    {"aten::sort", "", "Tib"},
    {"aten::topk", "", "Tiibb"},
    {"aten::gather", "", "TiI"},
    {"aten::scatter", "src", "TiIT"},
    {"aten::masked_fill", "Scalar", "TBs"},
    {"aten::_local_scalar_dense", "", "T"},
    {"aten::embedding", "", "TI"},
    {"aten::softmax", "int", "Ti"},
    {"aten::unfold", "", "Tiii"},
    {"aten::repeat", "", "TL"},
    {"aten::pow", "Tensor_Scalar", "Ts"},
    {"aten::cumsum", "", "Ti"},
    {"aten::flip", "", "TL"},
    {"aten::roll", "", "TLL"},
    {"aten::tril", "", "Ti"},
    {"aten::resize_", "", "TL!"},
    {"aten::set_", "source_Tensor", "TT!"},
    {"aten::split", "Tensor", "Tii"},
    {"aten::unbind", "int", "Ti"},
    {"aten::nonzero", "", "T"},
    {"aten::randperm", "", "idNDN"},
    {"aten::no_such_op", "", "T"},
    {"aten::add", "no_such_overload", "TT"},
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

  // A view that fits inside one of the buffers, of `dtype`.
  proto::TensorRef ValidTensor(int32_t dtype) {
    const int64_t element = dtype == 6 || dtype == 3 ? 4 : dtype == 11 ? 1 : 8;
    const uint64_t offset = (random_() % 8) * 8;
    const int64_t capacity =
        static_cast<int64_t>(buffer_bytes_ - offset) / element;
    proto::TensorRef tensor;
    tensor.set_address(buffers_[random_() % buffers_.size()] + offset);
    std::vector<int64_t> sizes(random_() % 4);
    int64_t numel = 1;
    for (int64_t& size : sizes) {
      size = 1 + random_() % 4;
      if (numel * size > capacity) size = 1;
      numel *= size;
    }
    int64_t stride = 1;
    std::vector<int64_t> strides(sizes.size());
    for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= sizes[d];
    }
    if (sizes.size() == 2 && random_() % 3 == 0) {  // transposed view
      std::swap(sizes[0], sizes[1]);
      std::swap(strides[0], strides[1]);
    }
    for (int64_t size : sizes) tensor.add_sizes(size);
    for (int64_t s : strides) tensor.add_strides(s);
    tensor.set_dtype(dtype);
    tensor.set_device(DeviceOfAddress(tensor.address()));
    return tensor;
  }

  proto::Argument FromSignature(char code) {
    if (random_() % 12 == 0) return Argument();  // mutation
    proto::Argument argument;
    switch (code) {
      case 'T':
        *argument.mutable_tensor() = ValidTensor(random_() % 8 ? 6 : 7);
        break;
      case 'I':
        *argument.mutable_tensor() = ValidTensor(4);
        break;
      case 'B':
        *argument.mutable_tensor() = ValidTensor(11);
        break;
      case 'A':
      case 'O':
        for (int i = 1 + random_() % 3; i > 0; --i) {
          *argument.mutable_tensor_list()->add_values()->mutable_tensor() =
              ValidTensor(code == 'A' ? 6 : 4);
        }
        break;
      case 's':
        *argument.mutable_scalar() = Scalar();
        break;
      case 'i':
        argument.set_int_value(SmallInt() % 4);
        break;
      case 'b':
        argument.set_bool_value(random_() % 2);
        break;
      case 'L':
        for (int i = random_() % 3; i > 0; --i) {
          argument.mutable_int_list()->add_values(random_() % 4);
        }
        break;
      case 'd':
        argument.set_int_value(random_() % 2 ? 6 : 4);
        break;
      case 'm':
        argument.set_int_value(random_() % 2);
        break;
      case 'D':
        argument.set_device(static_cast<int32_t>(random_() % 2));
        break;
      case 'r':
        argument.set_string_value(random_() % 2 ? "floor" : "trunc");
        break;
      default:
        argument.set_none(true);
    }
    return argument;
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
    const OpSpec& op = kOps[random_() % std::size(kOps)];
    launch->set_name(op.name);
    launch->set_overload(op.overload);
    const std::string signature = op.signature;
    const bool in_place = !signature.empty() && signature.back() == '!';
    if (random_() % 10 == 0) {  // arguments ignoring the signature
      for (int i = random_() % 5; i > 0; --i) {
        *launch->add_arguments() = Argument();
      }
    } else {
      for (char code : signature) {
        if (code != '!') *launch->add_arguments() = FromSignature(code);
      }
    }
    if (in_place && launch->arguments_size() > 0 &&
        launch->arguments(0).has_tensor() && random_() % 8 != 0) {
      *launch->add_outputs() = launch->arguments(0).tensor();
    } else if (random_() % 2 == 0) {
      launch->set_synchronous(true);
    } else {
      for (int i = random_() % 3; i > 0; --i) {
        *launch->add_outputs() = random_() % 2 ? ValidTensor(6) : Tensor();
      }
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

  // Bytes that do not parse as a Command (tag 0 is invalid), so that the
  // record fails as "malformed" instead of faulting the stream as a
  // command with the wrong sequence.
  std::string Garbage() {
    std::string bytes(1 + random_() % 64, '\0');
    for (size_t i = 1; i < bytes.size(); ++i) {
      bytes[i] = static_cast<char>(random_());
    }
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
  AtenOpRunner op_runner;
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
                      limits.ring_bytes, session->devices().doorbell(0));
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
  // The fuzzer produces both bad input and kernels that really run.
  const uint64_t kernels = devices->counters(0).kernels_executed.load();
  std::cout << iterations << " commands: " << failures << " failed, " << kernels
            << " kernels ran\n";
  EXPECT_GT(failures, 0);
  EXPECT_GT(kernels, iterations / 50);
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
}  // namespace openreg::daemon
