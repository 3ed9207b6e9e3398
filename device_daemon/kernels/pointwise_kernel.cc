#include "device_daemon/kernels/pointwise_kernel.h"

#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/string_view.h"
#include "device_daemon/kernels/pointwise_avx.h"

namespace openreg::daemon {
namespace {

// A Python number or 0-dim host tensor operand, as ATen casts it to the
// result's type `T`; nullopt for one this kernel leaves to ATen.
template <typename T>
std::optional<double> NumberAs(const proto::Argument& argument) {
  if (argument.has_int_value()) return static_cast<T>(argument.int_value());
  if (argument.has_double_value()) {
    return static_cast<T>(argument.double_value());
  }
  if (argument.has_scalar()) {
    const proto::Scalar& scalar = argument.scalar();
    if (scalar.value_case() == proto::Scalar::kD) {
      return static_cast<T>(scalar.d());
    }
    if (scalar.value_case() == proto::Scalar::kI) {
      return static_cast<T>(scalar.i());
    }
    return std::nullopt;
  }
  if (!argument.has_host_tensor()) return std::nullopt;
  const proto::HostTensor& host = argument.host_tensor();
  if (host.sizes_size() != 0) return std::nullopt;
  const std::string& bytes = host.data();
  switch (static_cast<c10::ScalarType>(host.dtype())) {
    case c10::kDouble: {
      double value;
      if (bytes.size() != sizeof(value)) return std::nullopt;
      std::memcpy(&value, bytes.data(), sizeof(value));
      return static_cast<T>(value);
    }
    case c10::kFloat: {
      float value;
      if (bytes.size() != sizeof(value)) return std::nullopt;
      std::memcpy(&value, bytes.data(), sizeof(value));
      return static_cast<T>(value);
    }
    case c10::kLong: {
      int64_t value;
      if (bytes.size() != sizeof(value)) return std::nullopt;
      std::memcpy(&value, bytes.data(), sizeof(value));
      return static_cast<T>(value);
    }
    default:
      return std::nullopt;
  }
}

// add's and sub's alpha: absent or exactly 1.
bool AlphaIsOne(const proto::LaunchOp& op) {
  if (op.arguments_size() < 3) return true;
  const proto::Argument& alpha = op.arguments(2);
  if (alpha.has_none()) return true;
  // As a number or an int (the codec sends the schema's default as one).
  if (alpha.has_int_value()) return alpha.int_value() == 1;
  if (alpha.has_double_value()) return alpha.double_value() == 1.0;
  if (!alpha.has_scalar()) return false;
  return (alpha.scalar().value_case() == proto::Scalar::kI &&
          alpha.scalar().i() == 1) ||
         (alpha.scalar().value_case() == proto::Scalar::kD &&
          alpha.scalar().d() == 1.0);
}

// A device tensor the loop may run over: real, not lazily negated,
// contiguous, and of the kernel's type and shape.
bool Plain(const at::Tensor* tensor, c10::ScalarType type,
           c10::IntArrayRef sizes) {
  return tensor != nullptr && tensor->scalar_type() == type &&
         !tensor->is_neg() && !tensor->is_conj() && tensor->is_contiguous() &&
         tensor->sizes() == sizes;
}

// An out= launch's `out`: its last argument, the launch's one output.
const at::Tensor* OutArgument(const proto::LaunchOp& op,
                              PointwiseKernel::TensorFinder find) {
  if (op.outputs_size() != 1 || op.arguments_size() == 0) return nullptr;
  const proto::Argument& last = op.arguments(op.arguments_size() - 1);
  if (!last.has_tensor() ||
      last.tensor().address() != op.outputs(0).address()) {
    return nullptr;
  }
  const at::Tensor* out = find(&last.tensor(), false);
  return out != nullptr ? out : find(&last.tensor(), true);
}

// `input` and `output` share some bytes but are not the same elements:
// ATen's TensorIterator refuses such operands (a loop would read elements
// it already wrote).
bool PartlyOverlaps(const at::Tensor& input, const at::Tensor& output) {
  const char* in = static_cast<const char*>(input.const_data_ptr());
  const char* out = static_cast<const char*>(output.const_data_ptr());
  const size_t in_bytes = input.numel() * input.element_size();
  const size_t out_bytes = output.numel() * output.element_size();
  const bool share = in < out + out_bytes && out < in + in_bytes;
  return share && (in != out || in_bytes != out_bytes);
}

#if defined(__SSE2__)
// The IEEE operations of ATen's lanes, four floats or two doubles at a
// time: SSE2 is in every x86-64, and ATen's Vectorized without AVX flags
// (the daemon is built for any x86-64) loops lane by lane.
template <typename T>
struct SseLanes;

template <>
struct SseLanes<float> {
  using Vector = __m128;
  static constexpr int kWidth = 4;
  static Vector Load(const float* p) { return _mm_loadu_ps(p); }
  static void Store(float* p, Vector v) { _mm_storeu_ps(p, v); }
  static Vector Broadcast(float x) { return _mm_set1_ps(x); }
  static Vector Add(Vector a, Vector b) { return _mm_add_ps(a, b); }
  static Vector Subtract(Vector a, Vector b) { return _mm_sub_ps(a, b); }
  static Vector Multiply(Vector a, Vector b) { return _mm_mul_ps(a, b); }
  static Vector Divide(Vector a, Vector b) { return _mm_div_ps(a, b); }
  static Vector Xor(Vector a, Vector b) { return _mm_xor_ps(a, b); }
  static Vector And(Vector a, Vector b) { return _mm_and_ps(a, b); }
  static Vector Or(Vector a, Vector b) { return _mm_or_ps(a, b); }
  // All ones in a lane that holds a NaN (unordered with itself).
  static Vector IsNaN(Vector a) { return _mm_cmpunord_ps(a, a); }
  static bool Any(Vector mask) { return _mm_movemask_ps(mask) != 0; }
};

template <>
struct SseLanes<double> {
  using Vector = __m128d;
  static constexpr int kWidth = 2;
  static Vector Load(const double* p) { return _mm_loadu_pd(p); }
  static void Store(double* p, Vector v) { _mm_storeu_pd(p, v); }
  static Vector Broadcast(double x) { return _mm_set1_pd(x); }
  static Vector Add(Vector a, Vector b) { return _mm_add_pd(a, b); }
  static Vector Subtract(Vector a, Vector b) { return _mm_sub_pd(a, b); }
  static Vector Multiply(Vector a, Vector b) { return _mm_mul_pd(a, b); }
  static Vector Divide(Vector a, Vector b) { return _mm_div_pd(a, b); }
  static Vector Xor(Vector a, Vector b) { return _mm_xor_pd(a, b); }
  static Vector And(Vector a, Vector b) { return _mm_and_pd(a, b); }
  static Vector Or(Vector a, Vector b) { return _mm_or_pd(a, b); }
  static Vector IsNaN(Vector a) { return _mm_cmpunord_pd(a, a); }
  static bool Any(Vector mask) { return _mm_movemask_pd(mask) != 0; }
};

// out[i] = apply(self[i], other[i]), or apply(self[i], number) when
// `other` is null. Each vector is loaded before it is stored, so an output
// that is an input (in place) reads what it would element by element. The
// last elements go through the same lanes, padded.
template <typename T, typename Apply>
void Sweep(const T* self, const T* other, T number, T* out, int64_t count,
           Apply apply) {
  using Lanes = SseLanes<T>;
  constexpr int kWidth = Lanes::kWidth;
  const typename Lanes::Vector constant = Lanes::Broadcast(number);
  int64_t i = 0;
  for (; i + kWidth <= count; i += kWidth) {
    const typename Lanes::Vector b =
        other != nullptr ? Lanes::Load(other + i) : constant;
    Lanes::Store(out + i, apply(Lanes::Load(self + i), b));
  }
  const int64_t rest = count - i;
  if (rest == 0) return;
  T a[kWidth] = {};
  T b[kWidth] = {};
  T result[kWidth];
  std::copy_n(self + i, rest, a);
  if (other != nullptr) std::copy_n(other + i, rest, b);
  Lanes::Store(result, apply(Lanes::Load(a),
                             other != nullptr ? Lanes::Load(b) : constant));
  std::copy_n(result, rest, out + i);
}
#endif

// Whether some element is a NaN in both `a` and `b`. With SSE2 lanes where
// there are: ATen's Vectorized without AVX flags costs about 2 us per
// 1,000 floats here, more than the op.
template <typename T>
bool NaNsMeet(const T* a, const T* b, int64_t count) {
  int64_t i = 0;
  if (CpuHasAvx() && NaNsMeetAvx(a, b, count, &i)) return true;
#if defined(__SSE2__)
  using Lanes = SseLanes<T>;
  typename Lanes::Vector shared = Lanes::Broadcast(0);
  for (; i + Lanes::kWidth <= count; i += Lanes::kWidth) {
    shared = Lanes::Or(shared, Lanes::And(Lanes::IsNaN(Lanes::Load(a + i)),
                                          Lanes::IsNaN(Lanes::Load(b + i))));
  }
  if (Lanes::Any(shared)) return true;
#endif
  for (; i < count; ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) return true;
  }
  return false;
}

template <typename T>
bool AnyNaN(const T* values, int64_t count) {
  return NaNsMeet(values, values, count);
}

}  // namespace

bool PointwiseKernel::MayMatch(absl::string_view name,
                               absl::string_view overload) {
  if (name == "aten::pow") return overload == "Scalar";
  if (!name.empty() && name.back() == '_') name.remove_suffix(1);
  return name == "aten::add" || name == "aten::sub" || name == "aten::mul" ||
         name == "aten::div" || name == "aten::neg" ||
         name == "aten::reciprocal" || name == "aten::zero";
}

std::optional<PointwiseKernel> PointwiseKernel::MatchPowerOfNumber(
    const proto::LaunchOp& op, TensorFinder find,
    const op_codec::KernelSettings& settings) {
  // pow(Scalar self, Tensor exponent), run as its out= overload.
  if (op.arguments_size() != 2 || !op.arguments(1).has_tensor() ||
      op.outputs_size() != 1) {
    return std::nullopt;
  }
  const at::Tensor* exponent =
      find(&op.arguments(1).tensor(), /*growable=*/false);
  const at::Tensor* out = find(&op.outputs(0), /*growable=*/true);
  if (exponent == nullptr || out == nullptr ||
      PartlyOverlaps(*exponent, *out)) {
    return std::nullopt;
  }
  PointwiseKernel kernel;
  kernel.operation_ = Operation::kPowerOfNumber;
  const c10::ScalarType type = out->scalar_type();
  std::optional<double> base;
  if (type == c10::kFloat) {
    kernel.type_ = Type::kFloat;
    base = NumberAs<float>(op.arguments(0));
  } else if (type == c10::kDouble) {
    kernel.type_ = Type::kDouble;
    base = NumberAs<double>(op.arguments(0));
  } else {
    return std::nullopt;
  }
  // One element: ATen's scalar std::pow (more would reach its vector
  // lanes' approximation).
  if (!base.has_value() || out->numel() != 1 ||
      !Plain(out, type, out->sizes()) || !Plain(exponent, type, out->sizes())) {
    return std::nullopt;
  }
  kernel.number_ = *base;
  kernel.count_ = 1;
  kernel.out_ = out->data_ptr();
  kernel.self_ = exponent->const_data_ptr();
  kernel.flush_denormal_ = settings.flush_denormal;
  return kernel;
}

std::optional<PointwiseKernel> PointwiseKernel::Match(
    const proto::LaunchOp& op, TensorFinder find,
    const op_codec::KernelSettings& settings) {
  if (op.name() == "aten::pow" && op.overload() == "Scalar") {
    return MatchPowerOfNumber(op, find, settings);
  }
  PointwiseKernel kernel;
  absl::string_view name = op.name();
  const bool in_place = !name.empty() && name.back() == '_';
  if (in_place) name.remove_suffix(1);
  bool binary = true;
  if (name == "aten::add") {
    kernel.operation_ = Operation::kAdd;
  } else if (name == "aten::sub") {
    kernel.operation_ = Operation::kSubtract;
  } else if (name == "aten::mul") {
    kernel.operation_ = Operation::kMultiply;
  } else if (name == "aten::div") {
    kernel.operation_ = Operation::kDivide;
  } else if (name == "aten::neg") {
    kernel.operation_ = Operation::kNegate;
    binary = false;
  } else if (name == "aten::reciprocal") {
    kernel.operation_ = Operation::kReciprocal;
    binary = false;
  } else if (name == "aten::zero" && in_place) {
    kernel.operation_ = Operation::kZero;  // fill_ with +0.0
    binary = false;
  } else {
    return std::nullopt;
  }
  const bool out_overload = binary && !in_place && op.overload() == "out";
  if (binary ? op.overload() != "Tensor" && op.overload() != "Scalar" &&
                   !out_overload
             : !op.overload().empty()) {
    return std::nullopt;
  }
  if (op.arguments_size() < (binary ? 2 : 1)) return std::nullopt;
  // A number first (a foreach op's `scalar * tensor` as mul.out): IEEE
  // addition and multiplication commute, so the loop takes it second.
  int self_index = 0;
  if (out_overload && !op.arguments(0).has_tensor() &&
      (kernel.operation_ == Operation::kAdd ||
       kernel.operation_ == Operation::kMultiply)) {
    self_index = 1;
  }
  if (!op.arguments(self_index).has_tensor()) return std::nullopt;
  if ((kernel.operation_ == Operation::kAdd ||
       kernel.operation_ == Operation::kSubtract) &&
      !AlphaIsOne(op)) {
    return std::nullopt;
  }
  const at::Tensor* self =
      find(&op.arguments(self_index).tensor(), /*growable=*/false);
  // The functional op ran as its out= overload into the client's output;
  // an out= launch writes its last argument.
  const at::Tensor* out = in_place       ? self
                          : out_overload ? OutArgument(op, find)
                          : op.outputs_size() == 1
                              ? find(&op.outputs(0), /*growable=*/true)
                              : nullptr;
  if (self == nullptr || out == nullptr || PartlyOverlaps(*self, *out)) {
    return std::nullopt;
  }
  const c10::ScalarType type = out->scalar_type();
  if (type == c10::kFloat) {
    kernel.type_ = Type::kFloat;
  } else if (type == c10::kDouble) {
    kernel.type_ = Type::kDouble;
  } else {
    return std::nullopt;
  }
  const c10::IntArrayRef sizes = out->sizes();
  if (!Plain(out, type, sizes) || !Plain(self, type, sizes) ||
      out->numel() > at::internal::GRAIN_SIZE) {
    return std::nullopt;
  }
  if (binary) {
    const proto::Argument& other = op.arguments(1 - self_index);
    if (other.has_tensor()) {
      const at::Tensor* tensor = find(&other.tensor(), /*growable=*/false);
      // Of the output's shape, or 0-dim (read at every run: device memory).
      const bool broadcast = tensor != nullptr && tensor->dim() == 0;
      if (!Plain(tensor, type, broadcast ? c10::IntArrayRef() : sizes) ||
          PartlyOverlaps(*tensor, *out)) {
        return std::nullopt;
      }
      kernel.other_ = tensor->const_data_ptr();
      kernel.other_broadcast_ = broadcast;
    } else {
      const std::optional<double> number = type == c10::kFloat
                                               ? NumberAs<float>(other)
                                               : NumberAs<double>(other);
      if (!number.has_value()) return std::nullopt;
      kernel.number_ = *number;
    }
  }
  kernel.count_ = out->numel();
  kernel.out_ = out->data_ptr();
  kernel.self_ = self->const_data_ptr();
  kernel.flush_denormal_ = settings.flush_denormal;
  return kernel;
}

template <typename T>
void PointwiseKernel::RunAs() const {
  if (operation_ == Operation::kPowerOfNumber) {
    // ATen's scalar lane for pow(number, tensor) (a base of 1 gives 1
    // there too: ATen's fill_(1) shortcut is pow's own rule).
    *static_cast<T*>(out_) =
        std::pow(static_cast<T>(number_), *static_cast<const T*>(self_));
    return;
  }
  const T* self = static_cast<const T*>(self_);
  const T* other = static_cast<const T*>(other_);
  T* out = static_cast<T*>(out_);
  // A 0-dim operand is read now: a kernel before this one may have
  // written it.
  const T number = other_broadcast_ ? *other : static_cast<T>(number_);
  const T* elementwise = other_broadcast_ ? nullptr : other;
#if defined(__SSE2__)
  int64_t count = count_;
  std::optional<AvxOperation> wide;  // the operations with an AVX form
  switch (operation_) {
    case Operation::kAdd:
      wide = AvxOperation::kAdd;
      break;
    case Operation::kSubtract:
      wide = AvxOperation::kSubtract;
      break;
    case Operation::kMultiply:
      wide = AvxOperation::kMultiply;
      break;
    case Operation::kDivide:
      wide = AvxOperation::kDivide;
      break;
    default:
      break;
  }
  if (wide.has_value() && CpuHasAvx()) {
    const int64_t done = SweepAvx(*wide, self, elementwise, number, out, count);
    if (done == count) return;
    // The last elements through SSE2's lanes, as below.
    self += done;
    out += done;
    if (elementwise != nullptr) elementwise += done;
    count -= done;
  }
  using Lanes = SseLanes<T>;
  using V = typename Lanes::Vector;
  switch (operation_) {
    case Operation::kAdd:
      return Sweep<T>(self, elementwise, number, out, count,
                      [](V a, V b) { return Lanes::Add(a, b); });
    case Operation::kSubtract:
      return Sweep<T>(self, elementwise, number, out, count,
                      [](V a, V b) { return Lanes::Subtract(a, b); });
    case Operation::kMultiply:
      return Sweep<T>(self, elementwise, number, out, count,
                      [](V a, V b) { return Lanes::Multiply(a, b); });
    case Operation::kDivide:
      return Sweep<T>(self, elementwise, number, out, count,
                      [](V a, V b) { return Lanes::Divide(a, b); });
    case Operation::kNegate:
      // ATen's neg flips the sign bit (NaNs too), as -x does.
      return Sweep<T>(self, nullptr, static_cast<T>(-0.0), out, count,
                      [](V a, V sign) { return Lanes::Xor(a, sign); });
    case Operation::kReciprocal:
      return Sweep<T>(self, nullptr, static_cast<T>(1), out, count,
                      [](V a, V one) { return Lanes::Divide(one, a); });
    case Operation::kZero:
      return Sweep<T>(self, nullptr, static_cast<T>(0), out, count,
                      [](V /*a*/, V zero) { return zero; });
    case Operation::kPowerOfNumber:
      return;  // run above
  }
#else
  using Vector = at::vec::Vectorized<T>;
  const Vector constant(number);
  // ATen's own expressions for these ops (its CPU kernels' vector lanes).
  auto apply = [this](const Vector& a, const Vector& b) {
    switch (operation_) {
      case Operation::kAdd:
        return a + b;
      case Operation::kSubtract:
        return a - b;
      case Operation::kMultiply:
        return a * b;
      case Operation::kDivide:
        return a / b;
      case Operation::kNegate:
        return a.neg();
      case Operation::kReciprocal:
        return a.reciprocal();
      case Operation::kZero:
        return Vector(T(0));
      case Operation::kPowerOfNumber:
        break;  // run above
    }
    return a;
  };
  // Whole vectors are loaded before they are stored, so an output that is
  // an input (in place) reads what it would element by element.
  int64_t i = 0;
  for (; i + Vector::size() <= count_; i += Vector::size()) {
    const Vector b =
        elementwise != nullptr ? Vector::loadu(elementwise + i) : constant;
    apply(Vector::loadu(self + i), b).store(out + i);
  }
  const int64_t rest = count_ - i;
  if (rest > 0) {
    const Vector b = elementwise != nullptr
                         ? Vector::loadu(elementwise + i, rest)
                         : constant;
    apply(Vector::loadu(self + i, rest), b).store(out + i, rest);
  }
#endif
}

template <typename T>
bool PointwiseKernel::OperandsShareANaNAs() const {
  const T* self = static_cast<const T*>(self_);
  if (other_ == nullptr || other_broadcast_) {
    const T number = other_ == nullptr ? static_cast<T>(number_)
                                       : *static_cast<const T*>(other_);
    return std::isnan(number) && AnyNaN(self, count_);
  }
  return NaNsMeet(self, static_cast<const T*>(other_), count_);
}

bool PointwiseKernel::OperandsShareANaN() const {
  switch (operation_) {
    case Operation::kAdd:
    case Operation::kSubtract:
    case Operation::kMultiply:
    case Operation::kDivide:
      return type_ == Type::kFloat ? OperandsShareANaNAs<float>()
                                   : OperandsShareANaNAs<double>();
    default:
      // One operand: its NaN is the result's in every lane. A power of
      // a number runs ATen's scalar lane exactly.
      return false;
  }
}

void PointwiseKernel::Run() const {
  op_codec::ApplyThreadFlushDenormal(flush_denormal_);
  if (type_ == Type::kFloat) {
    RunAs<float>();
  } else {
    RunAs<double>();
  }
}

}  // namespace openreg::daemon
