// The pointwise loop's (pointwise_kernel.h) whole 256-bit vectors, on CPUs
// with AVX: eight floats or four doubles a step instead of SSE2's four or
// two. The operations are the same IEEE ones, so every result, NaN
// payloads and flushed denormals (MXCSR governs both encodings) included,
// is the SSE2 lanes' bit for bit.
//
// Its own file because it is compiled with -mavx, which the rest of the
// daemon (built for any x86-64) is not: the file holds only intrinsics and
// plain loops, so no inline function shared with other files is emitted
// here with AVX instructions. Callers ask CpuHasAvx() first.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_POINTWISE_AVX_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_POINTWISE_AVX_H_

#include <cstdint>

namespace openreg::daemon {

enum class AvxOperation { kAdd, kSubtract, kMultiply, kDivide };

// Whether this CPU (and its OS) runs AVX; checked once.
bool CpuHasAvx();

// out[i] = self[i] op (other ? other[i] : number) for the whole vectors of
// `count`; returns how many elements it wrote (the rest are the caller's).
// A vector is loaded before it is stored: out may be self or other.
int64_t SweepAvx(AvxOperation operation, const float* self, const float* other,
                 float number, float* out, int64_t count);
int64_t SweepAvx(AvxOperation operation, const double* self,
                 const double* other, double number, double* out,
                 int64_t count);

// Whether some element of the whole vectors of `count` is a NaN in both
// `a` and `b`; `*checked` is how many elements it looked at.
bool NaNsMeetAvx(const float* a, const float* b, int64_t count,
                 int64_t* checked);
bool NaNsMeetAvx(const double* a, const double* b, int64_t count,
                 int64_t* checked);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_POINTWISE_AVX_H_
