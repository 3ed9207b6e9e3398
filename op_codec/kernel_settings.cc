#include "op_codec/kernel_settings.h"

#include <ATen/Parallel.h>
#include <c10/core/DefaultDtype.h>
#include <dlfcn.h>

#include <algorithm>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "data_plane/dtype.h"
#include "data_plane/error_codes.h"

namespace openreg::op_codec {
namespace {

// The FPU's flush-to-zero and denormals-are-zero bits, which
// torch.set_flush_denormal sets for the calling thread.
constexpr unsigned kFlushDenormalBits = 0x8040;

bool ThreadFlushesDenormals() {
#if defined(__SSE__)
  return (_mm_getcsr() & kFlushDenormalBits) == kFlushDenormalBits;
#else
  return false;
#endif
}

}  // namespace

void SetThreadIntraOpThreads(int threads) {
  using OmpSetThreads = void (*)(int);
  using MklSetThreads = int (*)(int);
  static const auto omp_set = reinterpret_cast<OmpSetThreads>(
      dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  // MKL's C entry point (in libtorch_cpu): the lower-case names there are
  // the Fortran ones, which take a pointer.
  static const auto mkl_set = reinterpret_cast<MklSetThreads>(
      dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
  if (omp_set != nullptr) omp_set(threads);
  if (mkl_set != nullptr) mkl_set(threads);
}

int DefaultIntraOpThreads() {
  static const int threads = [] {
    using NumProcs = int (*)();
    auto num_procs =
        reinterpret_cast<NumProcs>(dlsym(RTLD_DEFAULT, "omp_get_num_procs"));
    return num_procs != nullptr ? std::max(1, num_procs()) : 1;
  }();
  return threads;
}

bool operator==(const KernelSettings& a, const KernelSettings& b) {
  return SameProcessSettings(a, b) && a.intra_op_threads == b.intra_op_threads;
}

bool SameProcessSettings(const KernelSettings& a, const KernelSettings& b) {
  return a.default_dtype == b.default_dtype &&
         a.deterministic_algorithms == b.deterministic_algorithms &&
         a.deterministic_warn_only == b.deterministic_warn_only &&
         a.fill_uninitialized_memory == b.fill_uninitialized_memory &&
         a.mkldnn_matmul_precision == b.mkldnn_matmul_precision &&
         a.mkldnn_enabled == b.mkldnn_enabled &&
         a.deterministic_mkldnn == b.deterministic_mkldnn &&
         a.allow_fp16_reduction_cpu == b.allow_fp16_reduction_cpu &&
         a.allow_tf32_onednn == b.allow_tf32_onednn &&
         a.flush_denormal == b.flush_denormal;
}

KernelSettings CurrentKernelSettings() {
  const at::Context& context = at::globalContext();
  KernelSettings settings;
  settings.default_dtype = c10::get_default_dtype_as_scalartype();
  settings.deterministic_algorithms = context.deterministicAlgorithms();
  settings.deterministic_warn_only = context.deterministicAlgorithmsWarnOnly();
  settings.fill_uninitialized_memory =
      context.deterministicFillUninitializedMemory();
  settings.mkldnn_matmul_precision = context.float32Precision(
      at::Float32Backend::MKLDNN, at::Float32Op::MATMUL);
  settings.mkldnn_enabled = context.userEnabledMkldnn();
  settings.deterministic_mkldnn = context.deterministicMkldnn();
  settings.allow_fp16_reduction_cpu = context.allowFP16ReductionCPU();
  settings.allow_tf32_onednn = context.allowTF32OneDNN();
  settings.flush_denormal = ThreadFlushesDenormals();
  const int threads = at::get_num_threads();
  settings.intra_op_threads = threads == DefaultIntraOpThreads() ? 0 : threads;
  return settings;
}

void EncodeKernelSettings(const KernelSettings& settings,
                          proto::KernelSettings* out) {
  const KernelSettings defaults;
  if (settings.default_dtype != defaults.default_dtype) {
    out->set_default_dtype(static_cast<int32_t>(settings.default_dtype));
  }
  if (settings.deterministic_algorithms != defaults.deterministic_algorithms) {
    out->set_deterministic_algorithms(settings.deterministic_algorithms);
  }
  if (settings.deterministic_warn_only != defaults.deterministic_warn_only) {
    out->set_deterministic_warn_only(settings.deterministic_warn_only);
  }
  if (settings.fill_uninitialized_memory !=
      defaults.fill_uninitialized_memory) {
    out->set_fill_uninitialized_memory(settings.fill_uninitialized_memory);
  }
  if (settings.mkldnn_matmul_precision != defaults.mkldnn_matmul_precision) {
    out->set_mkldnn_matmul_precision(
        static_cast<int32_t>(settings.mkldnn_matmul_precision));
  }
  if (settings.mkldnn_enabled != defaults.mkldnn_enabled) {
    out->set_mkldnn_enabled(settings.mkldnn_enabled);
  }
  if (settings.deterministic_mkldnn != defaults.deterministic_mkldnn) {
    out->set_deterministic_mkldnn(settings.deterministic_mkldnn);
  }
  if (settings.allow_fp16_reduction_cpu != defaults.allow_fp16_reduction_cpu) {
    out->set_allow_fp16_reduction_cpu(settings.allow_fp16_reduction_cpu);
  }
  if (settings.allow_tf32_onednn != defaults.allow_tf32_onednn) {
    out->set_allow_tf32_onednn(settings.allow_tf32_onednn);
  }
  if (settings.flush_denormal != defaults.flush_denormal) {
    out->set_flush_denormal(settings.flush_denormal);
  }
  if (settings.intra_op_threads != defaults.intra_op_threads) {
    out->set_intra_op_threads(settings.intra_op_threads);
  }
}

absl::StatusOr<KernelSettings> DecodeKernelSettings(
    const proto::KernelSettings& in) {
  KernelSettings settings;
  if (in.has_default_dtype()) {
    // set_default_dtype accepts floating types only.
    const int32_t dtype = in.default_dtype();
    if (dtype < 0 || dtype >= kNumKnownDtypes ||
        !c10::isFloatingType(static_cast<c10::ScalarType>(dtype))) {
      return MakeError(proto::INVALID_VALUE,
                       absl::StrCat("default dtype ", dtype,
                                    " is not a floating point dtype"));
    }
    settings.default_dtype = static_cast<c10::ScalarType>(dtype);
  }
  if (in.has_mkldnn_matmul_precision()) {
    const int32_t precision = in.mkldnn_matmul_precision();
    if (precision < static_cast<int32_t>(at::Float32Precision::NONE) ||
        precision > static_cast<int32_t>(at::Float32Precision::DEFAULT)) {
      return MakeError(proto::INVALID_VALUE,
                       absl::StrCat("matmul precision ", precision,
                                    " is not one of ATen's"));
    }
    settings.mkldnn_matmul_precision =
        static_cast<at::Float32Precision>(precision);
  }
  if (in.has_deterministic_algorithms()) {
    settings.deterministic_algorithms = in.deterministic_algorithms();
  }
  if (in.has_deterministic_warn_only()) {
    settings.deterministic_warn_only = in.deterministic_warn_only();
  }
  if (in.has_fill_uninitialized_memory()) {
    settings.fill_uninitialized_memory = in.fill_uninitialized_memory();
  }
  if (in.has_mkldnn_enabled()) settings.mkldnn_enabled = in.mkldnn_enabled();
  if (in.has_deterministic_mkldnn()) {
    settings.deterministic_mkldnn = in.deterministic_mkldnn();
  }
  if (in.has_allow_fp16_reduction_cpu()) {
    settings.allow_fp16_reduction_cpu = in.allow_fp16_reduction_cpu();
  }
  if (in.has_allow_tf32_onednn()) {
    settings.allow_tf32_onednn = in.allow_tf32_onednn();
  }
  if (in.has_flush_denormal()) settings.flush_denormal = in.flush_denormal();
  if (in.has_intra_op_threads()) {
    const int32_t threads = in.intra_op_threads();
    if (threads < 1 || threads > kMaxIntraOpThreads) {
      return MakeError(proto::INVALID_VALUE,
                       absl::StrCat("intra-op threads ", threads,
                                    " is not in [1, ", kMaxIntraOpThreads,
                                    "]: torch.set_num_threads(n) with at "
                                    "most ",
                                    kMaxIntraOpThreads, " on openreg"));
    }
    settings.intra_op_threads = threads;
  }
  return settings;
}

void ApplyProcessSettings(const KernelSettings& settings) {
  // Only what differs: some setters warn on every call.
  const KernelSettings now = CurrentKernelSettings();
  at::Context& context = at::globalContext();
  if (now.default_dtype != settings.default_dtype) {
    c10::set_default_dtype(c10::scalarTypeToTypeMeta(settings.default_dtype));
  }
  if (now.deterministic_algorithms != settings.deterministic_algorithms ||
      now.deterministic_warn_only != settings.deterministic_warn_only) {
    context.setDeterministicAlgorithms(settings.deterministic_algorithms,
                                       settings.deterministic_warn_only);
  }
  if (now.fill_uninitialized_memory != settings.fill_uninitialized_memory) {
    context.setDeterministicFillUninitializedMemory(
        settings.fill_uninitialized_memory);
  }
  if (now.mkldnn_matmul_precision != settings.mkldnn_matmul_precision) {
    context.setFloat32Precision(at::Float32Backend::MKLDNN,
                                at::Float32Op::MATMUL,
                                settings.mkldnn_matmul_precision);
  }
  if (now.mkldnn_enabled != settings.mkldnn_enabled) {
    context.setUserEnabledMkldnn(settings.mkldnn_enabled);
  }
  if (now.deterministic_mkldnn != settings.deterministic_mkldnn) {
    context.setDeterministicMkldnn(settings.deterministic_mkldnn);
  }
  if (now.allow_fp16_reduction_cpu != settings.allow_fp16_reduction_cpu) {
    context.setAllowFP16ReductionCPU(settings.allow_fp16_reduction_cpu);
  }
  if (now.allow_tf32_onednn != settings.allow_tf32_onednn) {
    context.setAllowTF32OneDNN(settings.allow_tf32_onednn);
  }
}

void ApplyThreadFlushDenormal(bool flush_denormal) {
  if (ThreadFlushesDenormals() != flush_denormal) {
    at::Context::setFlushDenormal(flush_denormal);
  }
}

void ApplyThreadSettings(const KernelSettings& settings) {
  ApplyThreadFlushDenormal(settings.flush_denormal);
  // at::get_num_threads() first initializes this thread's count (once per
  // thread), which would otherwise undo ours later.
  const int threads = settings.intra_op_threads > 0 ? settings.intra_op_threads
                                                    : DefaultIntraOpThreads();
  if (at::get_num_threads() != threads) SetThreadIntraOpThreads(threads);
}

}  // namespace openreg::op_codec
