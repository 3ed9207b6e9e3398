// The op wire format (op_codec/op_codec.h): every argument kind encoded
// then decoded gives the same value, and a truncated or corrupted record
// is rejected with an error, never read out of bounds.
#include "op_codec/op_codec.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "data_plane/error_codes.h"
#include "data_plane/tensor_extent.h"
#include "gtest/gtest.h"

namespace openreg::op_codec {
namespace {

// Plays the daemon's side in one process: "device" tensors are CPU tensors
// registered here; a TensorRef is checked like the daemon checks it and
// then viewed in place.
class InProcessTensors : public DeviceTensorCodec {
 public:
  at::Tensor OnDevice(at::Tensor tensor) {
    device_memory_.insert(tensor.storage().data());
    return tensor;
  }

  absl::Status EncodeTensor(const at::Tensor& tensor,
                            proto::Argument* out) override {
    if (device_memory_.contains(tensor.storage().data())) {
      EncodeTensorRef(tensor, out->mutable_tensor());
      return absl::OkStatus();
    }
    return EncodeHostTensor(tensor, out->mutable_host_tensor());
  }

  absl::StatusOr<at::Tensor> DecodeTensorRef(
      const proto::TensorRef& ref) override {
    absl::StatusOr<TensorExtent> extent = ComputeTensorExtent(
        ref.dtype(),
        {ref.sizes().data(), static_cast<size_t>(ref.sizes_size())},
        {ref.strides().data(), static_cast<size_t>(ref.strides_size())});
    if (!extent.ok()) return extent.status();
    at::Tensor tensor = at::from_blob(
        reinterpret_cast<void*>(ref.address()),
        c10::IntArrayRef(ref.sizes().data(), ref.sizes_size()),
        c10::IntArrayRef(ref.strides().data(), ref.strides_size()),
        at::TensorOptions().dtype(static_cast<at::ScalarType>(ref.dtype())));
    if (ref.conj()) tensor._set_conj(true);
    if (ref.neg()) tensor._set_neg(true);
    return tensor;
  }

 private:
  absl::flat_hash_set<const void*> device_memory_;
};

const c10::FunctionSchema& Schema(const char* name, const char* overload) {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow(name, overload)
      .schema();
}

const c10::Argument& Parameter(const c10::FunctionSchema& schema,
                               const std::string& name) {
  for (const c10::Argument& argument : schema.arguments()) {
    if (argument.name() == name) return argument;
  }
  ADD_FAILURE() << schema.name() << " has no argument " << name;
  return schema.arguments()[0];
}

class OpCodecTest : public ::testing::Test {
 protected:
  // Encodes `value`, decodes it for `schema` (null: by wire kind).
  c10::IValue RoundTrip(const c10::IValue& value,
                        const c10::Argument* schema = nullptr,
                        const c10::TypePtr& type = nullptr) {
    proto::Argument wire;
    const absl::Status encoded = EncodeValue(value, type, tensors_, &wire);
    EXPECT_TRUE(encoded.ok()) << encoded;
    // Through bytes, as on the ring.
    proto::Argument parsed;
    EXPECT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
    absl::StatusOr<c10::IValue> decoded = DecodeValue(parsed, schema, tensors_);
    EXPECT_TRUE(decoded.ok()) << decoded.status();
    return decoded.ok() ? *decoded : c10::IValue();
  }

  absl::Status DecodeError(const proto::Argument& wire,
                           const c10::Argument* schema = nullptr) {
    return DecodeValue(wire, schema, tensors_).status();
  }

  void ExpectSameTensor(const at::Tensor& expected, const at::Tensor& actual) {
    ASSERT_TRUE(actual.defined());
    EXPECT_EQ(actual.sizes(), expected.sizes());
    EXPECT_EQ(actual.strides(), expected.strides());
    EXPECT_EQ(actual.scalar_type(), expected.scalar_type());
    EXPECT_EQ(actual.is_conj(), expected.is_conj());
    EXPECT_EQ(actual.is_neg(), expected.is_neg());
    EXPECT_TRUE(at::equal(actual.resolve_conj().resolve_neg(),
                          expected.resolve_conj().resolve_neg()));
  }

  InProcessTensors tensors_;
};

TEST_F(OpCodecTest, NumbersStringsAndDevicesRoundTrip) {
  EXPECT_EQ(RoundTrip(int64_t{-7}).toInt(), -7);
  EXPECT_EQ(RoundTrip(int64_t{INT64_MIN}).toInt(), INT64_MIN);
  EXPECT_EQ(RoundTrip(2.5).toDouble(), 2.5);
  EXPECT_TRUE(std::isnan(RoundTrip(std::nan("")).toDouble()));
  EXPECT_EQ(RoundTrip(true).toBool(), true);
  EXPECT_EQ(RoundTrip(std::string("reflect")).toStringRef(), "reflect");
  EXPECT_EQ(RoundTrip(std::string()).toStringRef(), "");
  EXPECT_EQ(RoundTrip(c10::complex<double>(1, -2)).toComplexDouble(),
            c10::complex<double>(1, -2));
  EXPECT_EQ(RoundTrip(c10::Device(c10::DeviceType::PrivateUse1, 1)).toDevice(),
            c10::Device(c10::DeviceType::PrivateUse1, 1));
}

TEST_F(OpCodecTest, ANumberReturnKeepsItsKind) {
  const c10::TypePtr number = c10::NumberType::get();
  EXPECT_TRUE(RoundTrip(int64_t{3}, nullptr, number).isInt());
  EXPECT_TRUE(RoundTrip(3.0, nullptr, number).isDouble());
  EXPECT_TRUE(RoundTrip(false, nullptr, number).isBool());
  EXPECT_TRUE(
      RoundTrip(c10::complex<double>(0, 1), nullptr, number).isComplexDouble());
}

TEST_F(OpCodecTest, SchemaDecidesWhatAWireValueBecomes) {
  // dropout(Tensor input, float p, bool train): an int given for a float.
  const c10::FunctionSchema& dropout = Schema("aten::dropout", "");
  const c10::IValue p = RoundTrip(int64_t{0}, &Parameter(dropout, "p"));
  EXPECT_TRUE(p.isDouble());
  // ones(..., ScalarType? dtype, Layout? layout, Device? device, ...):
  // optional None, and enums in range.
  const c10::FunctionSchema& ones = Schema("aten::ones", "");
  EXPECT_TRUE(RoundTrip(c10::IValue(), &Parameter(ones, "dtype")).isNone());
  EXPECT_EQ(RoundTrip(int64_t{6}, &Parameter(ones, "dtype")).toInt(), 6);
}

TEST_F(OpCodecTest, ListsRoundTripIncludingEmptyOnes) {
  EXPECT_EQ(RoundTrip(std::vector<int64_t>{}).toIntVector(),
            std::vector<int64_t>{});
  EXPECT_EQ(RoundTrip(std::vector<int64_t>{3, -1, 0}).toIntVector(),
            (std::vector<int64_t>{3, -1, 0}));
  EXPECT_EQ(RoundTrip(std::vector<double>{0.5, -1}).toDoubleVector(),
            (std::vector<double>{0.5, -1}));
  EXPECT_EQ(RoundTrip(c10::List<bool>({true, false})).toBoolList().vec(),
            (std::vector<bool>{true, false}));
  c10::impl::GenericList scalars(c10::NumberType::get());
  scalars.push_back(c10::IValue(int64_t{2}));
  scalars.push_back(c10::IValue(0.25));
  const c10::IValue decoded = RoundTrip(c10::IValue(scalars));
  ASSERT_TRUE(decoded.isList());
  ASSERT_EQ(decoded.toListRef().size(), 2u);
  EXPECT_TRUE(decoded.toListRef()[0].isInt());
  EXPECT_EQ(decoded.toListRef()[1].toDouble(), 0.25);
  EXPECT_EQ(RoundTrip(std::vector<at::Tensor>{}).toTensorVector().size(), 0u);
}

TEST_F(OpCodecTest, OptionalTensorListKeepsNoneElements) {
  // index.Tensor(Tensor self, Tensor?[] indices)
  const c10::FunctionSchema& index = Schema("aten::index", "Tensor");
  const at::Tensor rows = tensors_.OnDevice(at::arange(3));
  c10::List<std::optional<at::Tensor>> indices;
  indices.push_back(std::nullopt);
  indices.push_back(rows);
  const c10::IValue decoded =
      RoundTrip(c10::IValue(indices), &Parameter(index, "indices"));
  const c10::List<std::optional<at::Tensor>> list =
      decoded.toOptionalTensorList();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_FALSE(list.get(0).has_value());
  ASSERT_TRUE(list.get(1).has_value());
  ExpectSameTensor(rows, *list.get(1));
}

TEST_F(OpCodecTest, DeviceTensorViewsRoundTrip) {
  const at::Tensor base =
      tensors_.OnDevice(at::arange(24, at::kFloat).reshape({2, 3, 4}));
  ExpectSameTensor(base, RoundTrip(base).toTensor());
  ExpectSameTensor(base.transpose(0, 2),
                   RoundTrip(base.transpose(0, 2)).toTensor());
  // Element 0 of a view with an offset is its own address.
  const at::Tensor narrowed = base.narrow(2, 1, 2);
  ExpectSameTensor(narrowed, RoundTrip(narrowed).toTensor());
  EXPECT_EQ(RoundTrip(narrowed).toTensor().data_ptr(), narrowed.data_ptr());
  // Expanded (zero strides) and zero-size tensors.
  const at::Tensor expanded = base.select(0, 0).select(0, 0).expand({5, 4});
  ExpectSameTensor(expanded, RoundTrip(expanded).toTensor());
  const at::Tensor empty = tensors_.OnDevice(at::empty({0, 3}));
  ExpectSameTensor(empty, RoundTrip(empty).toTensor());
}

TEST_F(OpCodecTest, MaximumRankAndLazyBitsRoundTrip) {
  const at::Tensor deep = tensors_.OnDevice(
      at::ones(std::vector<int64_t>(kMaxTensorDims, 1), at::kDouble));
  ExpectSameTensor(deep, RoundTrip(deep).toTensor());
  const at::Tensor complex =
      tensors_.OnDevice(at::complex(at::arange(4, at::kFloat), at::ones({4})));
  ExpectSameTensor(complex.conj(), RoundTrip(complex.conj()).toTensor());
  const at::Tensor real = tensors_.OnDevice(at::arange(4, at::kFloat));
  ExpectSameTensor(real._neg_view(), RoundTrip(real._neg_view()).toTensor());
}

TEST_F(OpCodecTest, HostTensorsTravelByValue) {
  const at::Tensor scalar = at::scalar_tensor(3.5, at::kDouble);
  const at::Tensor decoded = RoundTrip(scalar).toTensor();
  EXPECT_EQ(decoded.dim(), 0);
  EXPECT_EQ(decoded.item<double>(), 3.5);
  // A non-contiguous host tensor arrives contiguous with the same values.
  const at::Tensor grid = at::arange(6, at::kInt).reshape({2, 3}).t();
  const at::Tensor copy = RoundTrip(grid).toTensor();
  EXPECT_TRUE(copy.is_contiguous());
  EXPECT_TRUE(at::equal(copy, grid));
  EXPECT_TRUE(RoundTrip(at::empty({0}, at::kLong)).toTensor().numel() == 0);
}

TEST_F(OpCodecTest, WrappedNumbersStayNumbersForTypePromotion) {
  at::Tensor number = at::scalar_tensor(1.5, at::kDouble);
  number.unsafeGetTensorImpl()->set_wrapped_number(true);
  const at::Tensor decoded = RoundTrip(number).toTensor();
  EXPECT_TRUE(decoded.unsafeGetTensorImpl()->is_wrapped_number());
  // int64 + a wrapped 1.5 is float32 (the default dtype); + a 0-dim
  // float64 tensor would be float64.
  EXPECT_EQ(at::result_type(at::ones({2}, at::kLong), decoded), at::kFloat);
  EXPECT_FALSE(RoundTrip(at::scalar_tensor(1.5, at::kDouble))
                   .toTensor()
                   .unsafeGetTensorImpl()
                   ->is_wrapped_number());
}

TEST_F(OpCodecTest, UndefinedTensorsTravelAsNone) {
  proto::Argument wire;
  ASSERT_TRUE(EncodeValue(at::Tensor(), nullptr, tensors_, &wire).ok());
  EXPECT_TRUE(wire.has_none());
  // In a result list, None is an undefined tensor again.
  std::vector<at::Tensor> grads = {at::Tensor(),
                                   tensors_.OnDevice(at::ones({2}))};
  const std::vector<at::Tensor> decoded = RoundTrip(grads).toTensorVector();
  ASSERT_EQ(decoded.size(), 2u);
  EXPECT_FALSE(decoded[0].defined());
  EXPECT_TRUE(decoded[1].defined());
}

TEST_F(OpCodecTest, OversizedHostTensorsAreRefusedAtEncoding) {
  proto::Argument wire;
  const absl::Status status =
      EncodeValue(at::zeros({kMaxInlineHostBytes / 4 + 1}, at::kFloat), nullptr,
                  tensors_, &wire);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("inline"), std::string::npos) << status;
}

TEST_F(OpCodecTest, MalformedValuesAreRejectedWithTheirArgumentNamed) {
  const c10::FunctionSchema& neg = Schema("aten::neg", "");
  const c10::Argument& self = Parameter(neg, "self");
  proto::Argument none;
  none.set_none(true);
  absl::Status status = DecodeError(none, &self);
  EXPECT_EQ(ErrorCodeOf(status), proto::INVALID_VALUE);
  EXPECT_NE(status.message().find("'self'"), std::string::npos) << status;
  EXPECT_NE(status.message().find("None"), std::string::npos) << status;

  proto::Argument unset;
  EXPECT_EQ(ErrorCodeOf(DecodeError(unset, &self)), proto::INVALID_VALUE);
  EXPECT_EQ(ErrorCodeOf(DecodeError(unset)), proto::INVALID_VALUE);

  const c10::FunctionSchema& ones = Schema("aten::ones", "");
  for (int64_t bad : {int64_t{-1}, int64_t{46}, int64_t{999}}) {
    proto::Argument dtype;
    dtype.set_int_value(bad);
    status = DecodeError(dtype, &Parameter(ones, "dtype"));
    EXPECT_NE(status.message().find("not a valid enum value"),
              std::string::npos)
        << status;
  }
  proto::Argument generator;
  generator.mutable_generator()->set_seed(1);
  EXPECT_FALSE(DecodeError(generator, &self).ok());
}

TEST_F(OpCodecTest, BadTensorRefsAndHostTensorsAreRejected) {
  const at::Tensor base = tensors_.OnDevice(at::ones({4}));
  proto::Argument wire;
  ASSERT_TRUE(EncodeValue(base, nullptr, tensors_, &wire).ok());
  const auto rejected = [&](auto mutate) {
    proto::Argument bad = wire;
    mutate(bad.mutable_tensor());
    return !DecodeError(bad).ok();
  };
  EXPECT_TRUE(rejected([](proto::TensorRef* ref) { ref->set_strides(0, -1); }));
  EXPECT_TRUE(rejected([](proto::TensorRef* ref) { ref->set_sizes(0, -4); }));
  EXPECT_TRUE(rejected([](proto::TensorRef* ref) { ref->add_sizes(2); }));
  EXPECT_TRUE(rejected([](proto::TensorRef* ref) { ref->set_dtype(1000); }));
  EXPECT_TRUE(rejected([](proto::TensorRef* ref) {
    ref->set_sizes(0, INT64_MAX);
    ref->set_strides(0, INT64_MAX);
  }));
  EXPECT_TRUE(rejected([](proto::TensorRef* ref) {
    for (int i = 0; i < kMaxTensorDims; ++i) {
      ref->add_sizes(1);
      ref->add_strides(1);
    }
  }));

  proto::Argument host;
  ASSERT_TRUE(
      EncodeValue(at::ones({2, 2}, at::kDouble), nullptr, tensors_, &host)
          .ok());
  const auto host_rejected = [&](auto mutate) {
    proto::Argument bad = host;
    mutate(bad.mutable_host_tensor());
    return !DecodeError(bad).ok();
  };
  EXPECT_TRUE(host_rejected([](proto::HostTensor* t) { t->add_sizes(2); }));
  EXPECT_TRUE(host_rejected(
      [](proto::HostTensor* t) { t->mutable_data()->resize(31); }));
  EXPECT_TRUE(host_rejected([](proto::HostTensor* t) { t->set_dtype(-3); }));
  EXPECT_TRUE(host_rejected([](proto::HostTensor* t) { t->set_dtype(12); }));
  EXPECT_TRUE(host_rejected([](proto::HostTensor* t) {
    t->set_sizes(0, INT64_MAX);
    t->set_sizes(1, INT64_MAX);
  }));
  EXPECT_TRUE(host_rejected([](proto::HostTensor* t) {
    for (int i = 0; i < kMaxTensorDims; ++i) t->add_sizes(1);
  }));
}

// A record of every argument kind: truncated at every length and with
// random bytes flipped, it either fails to parse or decodes to values or
// errors; it never crashes or reads outside its buffers (run under ASan
// with --config=asan).
TEST_F(OpCodecTest, TruncatedAndCorruptedRecordsNeverCrashTheDecoder) {
  const at::Tensor device = tensors_.OnDevice(at::arange(8, at::kFloat));
  proto::LaunchOp launch;
  launch.set_name("aten::index");
  launch.set_overload("Tensor");
  std::vector<c10::IValue> values = {
      device,
      at::scalar_tensor(2.0),
      int64_t{5},
      1.5,
      true,
      std::string("mean"),
      std::vector<int64_t>{1, 2, 3},
      std::vector<double>{0.1},
      c10::complex<double>(1, 1),
      c10::IValue(),
      c10::Device(c10::DeviceType::PrivateUse1, 0),
      std::vector<at::Tensor>{device, at::Tensor()},
  };
  for (const c10::IValue& value : values) {
    ASSERT_TRUE(
        EncodeValue(value, nullptr, tensors_, launch.add_arguments()).ok());
  }
  const std::string record = launch.SerializeAsString();
  const c10::FunctionSchema& index = Schema("aten::index", "Tensor");
  const auto decode_all = [&](const std::string& bytes) {
    proto::LaunchOp parsed;
    if (!parsed.ParseFromString(bytes)) return;
    for (int i = 0; i < parsed.arguments_size(); ++i) {
      // A corrupted TensorRef passes ComputeTensorExtent at worst as a view
      // of a wrong address, which decoding never reads (the daemon's
      // allocation table rejects it there).
      (void)DecodeValue(parsed.arguments(i), nullptr, tensors_);
      (void)DecodeValue(parsed.arguments(i),
                        &index.arguments()[i % index.arguments().size()],
                        tensors_);
    }
  };
  for (size_t length = 0; length < record.size(); ++length) {
    decode_all(record.substr(0, length));
  }
  std::mt19937 random(20261123);
  int parsed_after_corruption = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string corrupted = record;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips; ++f) {
      corrupted[random() % corrupted.size()] ^=
          static_cast<char>(1 << (random() % 8));
    }
    proto::LaunchOp probe;
    if (probe.ParseFromString(corrupted)) ++parsed_after_corruption;
    decode_all(corrupted);
  }
  // Most flips still parse: the decoder, not the parser, saw them.
  EXPECT_GT(parsed_after_corruption, 100);
}

}  // namespace
}  // namespace openreg::op_codec
