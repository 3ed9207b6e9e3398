// The launch writer (op_codec/launch_writer.h) writes exactly the bytes
// protobuf serializes for the LaunchOp that EncodeValue builds with the
// client's rule for tensors, and declines every kind it does not know
// without writing anything.
#include "op_codec/launch_writer.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "data_plane/device_address.h"
#include "op_codec/kernel_settings.h"
#include "op_codec/op_codec.h"
#include "protos/commands.pb.h"

namespace openreg::op_codec {
namespace {

// The client's rule (torch_backend/op_encoding.cc): an openreg tensor
// travels as a TensorRef, a CPU tensor by value.
class ClientRule : public DeviceTensorCodec {
 public:
  absl::Status EncodeTensor(const at::Tensor& tensor,
                            proto::Argument* out) override {
    if (tensor.is_privateuseone()) {
      EncodeTensorRef(tensor, out->mutable_tensor());
      return absl::OkStatus();
    }
    return EncodeHostTensor(tensor, out->mutable_host_tensor());
  }
  absl::StatusOr<at::Tensor> DecodeTensorRef(const proto::TensorRef&) override {
    return absl::UnimplementedError("not decoded here");
  }
};

// An openreg tensor as the client holds one: a PrivateUse1 tensor whose
// data pointer is an opaque device address, never dereferenced.
at::Tensor DeviceTensor(const std::vector<int64_t>& sizes,
                        const std::vector<int64_t>& strides,
                        at::ScalarType dtype = at::kFloat, int device = 0,
                        uint64_t offset = 0x4000, int64_t storage_offset = 0) {
  const uint64_t address = offset == 0 ? 0 : MakeDeviceAddress(device, offset);
  c10::DataPtr data(reinterpret_cast<void*>(address),  // NOLINT: opaque
                    c10::Device(c10::DeviceType::PrivateUse1,
                                static_cast<c10::DeviceIndex>(device)));
  c10::Storage storage(c10::Storage::use_byte_size_t(), 1 << 20,
                       std::move(data), /*allocator=*/nullptr,
                       /*resizable=*/false);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides,
                                                      storage_offset);
  return tensor;
}

// What the proto path sends for the same launch.
std::string ProtoBytes(const std::string& name, const std::string& overload,
                       const std::vector<c10::IValue>& arguments,
                       const std::vector<at::Tensor>& outputs,
                       const proto::KernelSettings* settings = nullptr) {
  ClientRule rule;
  proto::LaunchOp launch;
  launch.set_name(name);
  launch.set_overload(overload);
  for (const c10::IValue& argument : arguments) {
    EXPECT_TRUE(
        EncodeValue(argument, nullptr, rule, launch.add_arguments()).ok());
  }
  for (const at::Tensor& output : outputs) {
    EncodeTensorRef(output, launch.add_outputs());
  }
  if (settings != nullptr) *launch.mutable_settings() = *settings;
  return launch.SerializeAsString();
}

std::string WriterBytes(const std::string& name, const std::string& overload,
                        const std::vector<c10::IValue>& arguments,
                        const std::vector<at::Tensor>& outputs,
                        const proto::KernelSettings* settings = nullptr) {
  LaunchWriter writer;
  writer.Begin(name, overload);
  for (const c10::IValue& argument : arguments) {
    EXPECT_TRUE(writer.AddArgument(argument)) << argument.tagKind();
  }
  for (const at::Tensor& output : outputs) {
    EXPECT_TRUE(writer.AddOutput(output));
  }
  if (settings != nullptr) writer.SetSettings(*settings);
  return std::string(writer.bytes());
}

void ExpectSameBytes(const std::string& name, const std::string& overload,
                     const std::vector<c10::IValue>& arguments,
                     const std::vector<at::Tensor>& outputs,
                     const proto::KernelSettings* settings = nullptr) {
  const std::string expected =
      ProtoBytes(name, overload, arguments, outputs, settings);
  const std::string written =
      WriterBytes(name, overload, arguments, outputs, settings);
  EXPECT_EQ(absl::BytesToHexString(written), absl::BytesToHexString(expected));
}

TEST(LaunchWriterTest, AnAddOfTwoDeviceTensorsIsWhatProtobufWrites) {
  const at::Tensor a = DeviceTensor({1024}, {1});
  const at::Tensor b = DeviceTensor({1024}, {1}, at::kFloat, 0, 0x8000);
  const at::Tensor out = DeviceTensor({1024}, {1}, at::kFloat, 0, 0xc000);
  ExpectSameBytes("aten::add", "Tensor", {a, b, int64_t{1}}, {out});
  // An op without an overload name.
  ExpectSameBytes("aten::neg", "", {a}, {out});
}

TEST(LaunchWriterTest, EveryTensorRefFieldAndItsDefaultAreWritten) {
  // Device 1, a storage offset, strides of a transposed view, a zero-size
  // dimension, a dtype whose value is 0 (uint8), address 0 (no memory).
  const at::Tensor strided =
      DeviceTensor({4, 3}, {1, 4}, at::kDouble, /*device=*/1, 0x123456, 7);
  const at::Tensor empty = DeviceTensor({0, 5}, {5, 1}, at::kByte, 0, 0);
  const at::Tensor scalar = DeviceTensor({}, {}, at::kLong, 3);
  ExpectSameBytes("aten::mm", "", {strided, empty, scalar}, {strided});
  // The lazy conjugate and negative bits.
  at::Tensor conj = DeviceTensor({8}, {1}, at::kComplexFloat);
  conj.unsafeGetTensorImpl()->_set_conj(true);
  at::Tensor neg = DeviceTensor({8}, {1}, at::kComplexFloat, 0, 0x9000);
  neg.unsafeGetTensorImpl()->_set_neg(true);
  ExpectSameBytes("aten::mul", "Tensor", {conj, neg}, {});
}

TEST(LaunchWriterTest, ScalarsStringsAndListsAreWhatProtobufWrites) {
  const at::Tensor self = DeviceTensor({2, 3}, {3, 1});
  const std::vector<c10::IValue> values = {
      c10::IValue(),
      true,
      false,
      int64_t{0},
      int64_t{-1},
      std::numeric_limits<int64_t>::max(),
      std::numeric_limits<int64_t>::min(),
      0.0,
      -0.0,
      0.5,
      -3.25e300,
      std::numeric_limits<double>::quiet_NaN(),
      std::numeric_limits<double>::infinity(),
      std::string(),
      std::string("mean"),
      std::vector<int64_t>{},
      std::vector<int64_t>{-1, 0, 1 << 20},
  };
  for (const c10::IValue& value : values) {
    ExpectSameBytes("aten::op", "overload", {self, value}, {});
  }
}

TEST(LaunchWriterTest, HostTensorsTravelByValueAsProtobufWritesThem) {
  // A Python number wrapped as a tensor (`x * 0.5`), a 0-dim int, a uint8
  // vector (dtype 0 is omitted on the wire), an empty one.
  at::Tensor wrapped = at::scalar_tensor(0.5, at::kDouble);
  wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
  const at::Tensor device = DeviceTensor({16}, {1});
  ExpectSameBytes("aten::mul", "Tensor", {device, wrapped}, {device});
  ExpectSameBytes("aten::index", "Tensor",
                  {device, at::scalar_tensor(3, at::kLong),
                   at::arange(10, at::kByte), at::empty({0}, at::kFloat)},
                  {});
}

TEST(LaunchWriterTest, LongNestedMessagesGetLongerLengthPrefixes) {
  // A tensor list of 300 tensors: the list is longer than 16 KiB (a
  // three-byte length), each element longer than 127 bytes (two bytes:
  // 14 dimensions whose strides take 8 bytes each).
  const std::vector<int64_t> sizes(14, 2);
  std::vector<int64_t> strides;
  strides.reserve(14);
  for (int d = 0; d < 14; ++d) strides.push_back(int64_t{1} << (53 - d));
  std::vector<at::Tensor> list;
  list.reserve(300);
  for (int i = 0; i < 300; ++i) {
    list.push_back(DeviceTensor(sizes, strides, at::kFloat, i % 4,
                                uint64_t{0x1000} * (i + 1), i));
  }
  list[17] = at::Tensor();  // an undefined element travels as None
  ExpectSameBytes("aten::_foreach_add_", "Scalar", {list, 2.5}, {});
  ASSERT_GT(ProtoBytes("aten::_foreach_add_", "Scalar", {list, 2.5}, {}).size(),
            16384u);
}

TEST(LaunchWriterTest, SettingsOtherThanTheDefaultsAreWrittenLast) {
  KernelSettings settings;
  settings.deterministic_algorithms = true;
  settings.intra_op_threads = 3;
  proto::KernelSettings encoded;
  EncodeKernelSettings(settings, &encoded);
  const at::Tensor a = DeviceTensor({4}, {1});
  ExpectSameBytes("aten::sum", "", {a, c10::IValue()}, {a}, &encoded);
}

TEST(LaunchWriterTest, KindsItDoesNotKnowAreDeclinedWithNothingWritten) {
  const at::Tensor device = DeviceTensor({4}, {1});
  c10::List<std::optional<at::Tensor>> optional_tensors;
  optional_tensors.push_back(device);
  optional_tensors.push_back(std::nullopt);
  const std::vector<c10::IValue> declined = {
      c10::complex<double>(1, 2),
      std::vector<double>{0.5},
      c10::Device(c10::DeviceType::PrivateUse1, 0),
      optional_tensors,
      // CPU tensors EncodeHostTensor would copy or refuse.
      at::zeros({4, 4}).t(),
      at::zeros({64 * 1024 / 4 + 1}),
      std::vector<at::Tensor>{device, at::zeros({3, 3}).t()},
      // Layouts other than strided.
      at::zeros({2, 2}).to_sparse(),
  };
  for (const c10::IValue& value : declined) {
    LaunchWriter writer;
    writer.Begin("aten::op", "");
    ASSERT_TRUE(writer.AddArgument(device));
    const std::string before(writer.bytes());
    EXPECT_FALSE(writer.AddArgument(value)) << value.tagKind();
    EXPECT_EQ(std::string(writer.bytes()), before) << value.tagKind();
  }
  // A CPU tensor is never an output.
  LaunchWriter writer;
  writer.Begin("aten::op", "");
  EXPECT_FALSE(writer.AddOutput(at::zeros({4})));
  EXPECT_EQ(std::string(writer.bytes()), ProtoBytes("aten::op", "", {}, {}));
}

TEST(LaunchWriterTest, BeginForgetsTheLastLaunch) {
  LaunchWriter writer;
  writer.Begin("aten::first", "a");
  ASSERT_TRUE(writer.AddArgument(int64_t{12345}));
  writer.Begin("aten::second", "");
  EXPECT_EQ(std::string(writer.bytes()),
            ProtoBytes("aten::second", "", {}, {}));
}

}  // namespace
}  // namespace openreg::op_codec
