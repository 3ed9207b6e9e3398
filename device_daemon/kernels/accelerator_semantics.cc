#include "device_daemon/kernels/accelerator_semantics.h"

#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/fmod_cpu_dispatch.h>
#include <ATen/ops/pow_cpu_dispatch.h>
#include <ATen/ops/remainder_cpu_dispatch.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <memory>

namespace openreg::daemon {
namespace {

// An out= overload's ending: `result` into `out`, resized as CPU's kernels
// resize an out= (with their warning when it had elements).
at::Tensor& CopiedInto(const at::Tensor& result, at::Tensor& out) {
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

// --- Integer division by zero -------------------------------------------

using BinaryKernel = at::Tensor (*)(const at::Tensor&, const at::Tensor&);

bool DividesIntegersByZero(const at::Tensor& self, const at::Tensor& other) {
  if (!at::isIntegralType(at::result_type(self, other),
                          /*includeBool=*/false)) {
    return false;
  }
  return other.eq(0).any().item<bool>();
}

// CUDA's result where the divisor is zero, else CPU's kernel's.
at::Tensor WithCudaZeroDivisor(const at::Tensor& self, const at::Tensor& other,
                               BinaryKernel kernel) {
  const at::ScalarType dtype = at::result_type(self, other);
  const at::Tensor by_zero = other.eq(0);
  const at::Tensor safe_divisor = other.masked_fill(by_zero, 1);
  const at::Tensor quotient_free = kernel(self, safe_divisor);
  const at::Tensor all_ones = at::full({}, -1, self.options().dtype(at::kLong));
  const at::Tensor cuda_value =
      dtype == at::kLong ? at::where(self.ge(0),
                                     at::full({}, 4294967295LL,
                                              self.options().dtype(at::kLong)),
                                     all_ones)
                         : all_ones;
  return at::where(by_zero, cuda_value.to(dtype), quotient_free);
}

template <BinaryKernel kKernel>
at::Tensor Functional(const at::Tensor& self, const at::Tensor& other) {
  if (!DividesIntegersByZero(self, other)) return kKernel(self, other);
  return WithCudaZeroDivisor(self, other, kKernel);
}

template <BinaryKernel kKernel,
          at::Tensor& (*kInPlace)(at::Tensor&, const at::Tensor&)>
at::Tensor& InPlace(at::Tensor& self, const at::Tensor& other) {
  if (!DividesIntegersByZero(self, other)) return kInPlace(self, other);
  const at::Tensor result = WithCudaZeroDivisor(self, other, kKernel);
  // An in-place op never resizes self: CPU's kernel gives its error.
  if (result.sizes() != self.sizes()) return kInPlace(self, other);
  self.copy_(result);
  return self;
}

template <BinaryKernel kKernel,
          at::Tensor& (*kOut)(at::Tensor&, const at::Tensor&,
                              const at::Tensor&)>
at::Tensor& Out(const at::Tensor& self, const at::Tensor& other,
                at::Tensor& out) {
  if (!DividesIntegersByZero(self, other)) return kOut(out, self, other);
  return CopiedInto(WithCudaZeroDivisor(self, other, kKernel), out);
}

at::Tensor CpuFmod(const at::Tensor& self, const at::Tensor& other) {
  return at::cpu::fmod(self, other);
}
at::Tensor CpuRemainder(const at::Tensor& self, const at::Tensor& other) {
  return at::cpu::remainder(self, other);
}
at::Tensor& CpuFmodInPlace(at::Tensor& self, const at::Tensor& other) {
  return at::cpu::fmod_(self, other);
}
at::Tensor& CpuRemainderInPlace(at::Tensor& self, const at::Tensor& other) {
  return at::cpu::remainder_(self, other);
}
at::Tensor& CpuFmodOut(at::Tensor& out, const at::Tensor& self,
                       const at::Tensor& other) {
  return at::cpu::fmod_out(out, self, other);
}
at::Tensor& CpuRemainderOut(at::Tensor& out, const at::Tensor& self,
                            const at::Tensor& other) {
  return at::cpu::remainder_out(out, self, other);
}

// --- ComplexHalf pow --------------------------------------------------------

bool IsComplexHalf(const at::Tensor& tensor) {
  return tensor.scalar_type() == at::kComplexHalf;
}
// An operand of a pow whose result is ComplexHalf, in the type CUDA
// computes it in (a float16 tensor with a complex exponent, too).
at::Tensor Widened(const at::Tensor& tensor) {
  return tensor.to(at::kComplexFloat);
}
bool ComplexHalfResult(at::ScalarType dtype) {
  return dtype == at::kComplexHalf;
}

at::Tensor PowTensorTensor(const at::Tensor& self, const at::Tensor& exponent) {
  if (!ComplexHalfResult(at::result_type(self, exponent))) {
    return at::cpu::pow(self, exponent);
  }
  return at::cpu::pow(Widened(self), Widened(exponent)).to(at::kComplexHalf);
}
at::Tensor& PowTensorTensorInPlace(at::Tensor& self,
                                   const at::Tensor& exponent) {
  if (!IsComplexHalf(self)) return at::cpu::pow_(self, exponent);
  const at::Tensor result = PowTensorTensor(self, exponent);
  if (result.sizes() != self.sizes()) return at::cpu::pow_(self, exponent);
  self.copy_(result);
  return self;
}
at::Tensor& PowTensorTensorOut(const at::Tensor& self,
                               const at::Tensor& exponent, at::Tensor& out) {
  if (!ComplexHalfResult(at::result_type(self, exponent))) {
    return at::cpu::pow_out(out, self, exponent);
  }
  return CopiedInto(PowTensorTensor(self, exponent), out);
}

at::Tensor PowTensorScalar(const at::Tensor& self, const at::Scalar& exponent) {
  if (!ComplexHalfResult(at::result_type(self, exponent))) {
    return at::cpu::pow(self, exponent);
  }
  return at::cpu::pow(Widened(self), exponent).to(at::kComplexHalf);
}
at::Tensor& PowTensorScalarInPlace(at::Tensor& self,
                                   const at::Scalar& exponent) {
  if (!IsComplexHalf(self)) return at::cpu::pow_(self, exponent);
  self.copy_(PowTensorScalar(self, exponent));
  return self;
}
at::Tensor& PowTensorScalarOut(const at::Tensor& self,
                               const at::Scalar& exponent, at::Tensor& out) {
  if (!ComplexHalfResult(at::result_type(self, exponent))) {
    return at::cpu::pow_out(out, self, exponent);
  }
  return CopiedInto(PowTensorScalar(self, exponent), out);
}

at::Tensor PowScalarTensor(const at::Scalar& self, const at::Tensor& exponent) {
  if (!ComplexHalfResult(at::result_type(self, exponent))) {
    return at::cpu::pow(self, exponent);
  }
  return at::cpu::pow(self, Widened(exponent)).to(at::kComplexHalf);
}
at::Tensor& PowScalarTensorOut(const at::Scalar& self,
                               const at::Tensor& exponent, at::Tensor& out) {
  if (!ComplexHalfResult(at::result_type(self, exponent))) {
    return at::cpu::pow_out(out, self, exponent);
  }
  return CopiedInto(PowScalarTensor(self, exponent), out);
}

// Replacing a CPU kernel makes the dispatcher warn ("Overriding a
// previously registered kernel"): expected here, so not logged.
class DropWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};

}  // namespace

void RegisterAcceleratorSemantics() {
  DropWarnings drop;
  const c10::WarningUtils::WarningHandlerGuard guard(&drop);
  // Lives for the process: the registrations end with the library object.
  static auto* library = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
  library->impl("fmod.Tensor", TORCH_FN(Functional<&CpuFmod>));
  library->impl("fmod_.Tensor", TORCH_FN((InPlace<&CpuFmod, &CpuFmodInPlace>)));
  library->impl("fmod.Tensor_out", TORCH_FN((Out<&CpuFmod, &CpuFmodOut>)));
  library->impl("remainder.Tensor", TORCH_FN(Functional<&CpuRemainder>));
  library->impl("remainder_.Tensor",
                TORCH_FN((InPlace<&CpuRemainder, &CpuRemainderInPlace>)));
  library->impl("remainder.Tensor_out",
                TORCH_FN((Out<&CpuRemainder, &CpuRemainderOut>)));
  library->impl("pow.Tensor_Tensor", TORCH_FN(PowTensorTensor));
  library->impl("pow_.Tensor", TORCH_FN(PowTensorTensorInPlace));
  library->impl("pow.Tensor_Tensor_out", TORCH_FN(PowTensorTensorOut));
  library->impl("pow.Tensor_Scalar", TORCH_FN(PowTensorScalar));
  library->impl("pow_.Scalar", TORCH_FN(PowTensorScalarInPlace));
  library->impl("pow.Tensor_Scalar_out", TORCH_FN(PowTensorScalarOut));
  library->impl("pow.Scalar", TORCH_FN(PowScalarTensor));
  library->impl("pow.Scalar_out", TORCH_FN(PowScalarTensorOut));
}

}  // namespace openreg::daemon
