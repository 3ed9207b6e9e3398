#include "device_daemon/kernels/launch_threads.h"

#include <ATen/TensorIterator.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <string_view>

namespace openreg::daemon {
namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

template <typename Sizes>
int64_t ElementsOfSizes(const Sizes& sizes) {
  int64_t elements = 1;
  for (const int64_t size : sizes) {
    if (size <= 0) return 0;
    if (elements > kUnbounded / size) return kUnbounded;
    elements *= size;
  }
  return elements;
}

int64_t Elements(const proto::Argument& argument) {
  switch (argument.value_case()) {
    case proto::Argument::kTensor:
      return ElementsOfSizes(argument.tensor().sizes());
    case proto::Argument::kHostTensor:
      return ElementsOfSizes(argument.host_tensor().sizes());
    case proto::Argument::kTensorList: {
      int64_t largest = 0;
      for (const proto::Argument& item : argument.tensor_list().values()) {
        largest = std::max(largest, Elements(item));
      }
      return largest;
    }
    case proto::Argument::kSparseCoo:
      return kUnbounded;
    default:
      return 0;
  }
}

// Ops (names after "aten::", prefixes) whose libraries choose their own
// split by thread count at any size: BLAS (MKL's gemm differs between one
// and two threads on a 10x32 by 32x64 product), oneDNN's convolutions,
// MKL's FFT, LAPACK, embedding_bag's per-thread buffers, and layer norm's
// backward, which sums the weight's and bias's gradients in one buffer per
// thread (a 2x3x5x7 input's gave other bits on one thread than on two for
// 10 of 10 draws; group, batch and RMS norm's and nll_loss's did not).
constexpr std::string_view kSplitsAtAnySize[] = {"mm",
                                                 "addmm",
                                                 "_addmm_activation",
                                                 "bmm",
                                                 "baddbmm",
                                                 "addbmm",
                                                 "mv",
                                                 "addmv",
                                                 "dot",
                                                 "vdot",
                                                 "addr",
                                                 "_int_mm",
                                                 "conv",
                                                 "_convolution",
                                                 "mkldnn_",
                                                 "_slow_conv",
                                                 "slow_conv",
                                                 "_fft_",
                                                 "fft_",
                                                 "stft",
                                                 "istft",
                                                 "_embedding_bag",
                                                 "embedding_bag",
                                                 "linalg_",
                                                 "_linalg_",
                                                 "cholesky",
                                                 "_cholesky",
                                                 "lu_",
                                                 "_lu",
                                                 "geqrf",
                                                 "orgqr",
                                                 "ormqr",
                                                 "triangular_solve",
                                                 "matrix_exp",
                                                 "native_layer_norm_backward"};

}  // namespace

int64_t LargestTensorElements(const proto::LaunchOp& op) {
  int64_t largest = 0;
  for (const proto::Argument& argument : op.arguments()) {
    largest = std::max(largest, Elements(argument));
  }
  for (const proto::TensorRef& output : op.outputs()) {
    largest = std::max(largest, ElementsOfSizes(output.sizes()));
  }
  return largest;
}

bool SplitsAtAnySize(const proto::LaunchOp& op) {
  constexpr std::string_view kAten = "aten::";
  const std::string_view full_name = op.name();
  if (full_name.substr(0, kAten.size()) != kAten) return true;  // not ATen's
  const std::string_view name = full_name.substr(kAten.size());
  return std::any_of(std::begin(kSplitsAtAnySize), std::end(kSplitsAtAnySize),
                     [name](std::string_view prefix) {
                       return name.substr(0, prefix.size()) == prefix;
                     });
}

int LaunchIntraOpThreads(const proto::LaunchOp& op, const ResolvedOp* resolved,
                         int requested) {
  if (requested <= 1 || resolved == nullptr) return requested;
  if (resolved->pointwise) return 1;
  if (LargestTensorElements(op) > at::internal::GRAIN_SIZE) return requested;
  if (SplitsAtAnySize(op)) return requested;
  return 1;
}

}  // namespace openreg::daemon
