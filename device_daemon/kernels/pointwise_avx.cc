#include "device_daemon/kernels/pointwise_avx.h"

#include <immintrin.h>

namespace openreg::daemon {

bool CpuHasAvx() {
  static const bool has_avx = __builtin_cpu_supports("avx");
  return has_avx;
}

namespace {

__m256 Apply(AvxOperation operation, __m256 a, __m256 b) {
  switch (operation) {
    case AvxOperation::kAdd:
      return _mm256_add_ps(a, b);
    case AvxOperation::kSubtract:
      return _mm256_sub_ps(a, b);
    case AvxOperation::kMultiply:
      return _mm256_mul_ps(a, b);
    case AvxOperation::kDivide:
      return _mm256_div_ps(a, b);
  }
  return a;
}

__m256d Apply(AvxOperation operation, __m256d a, __m256d b) {
  switch (operation) {
    case AvxOperation::kAdd:
      return _mm256_add_pd(a, b);
    case AvxOperation::kSubtract:
      return _mm256_sub_pd(a, b);
    case AvxOperation::kMultiply:
      return _mm256_mul_pd(a, b);
    case AvxOperation::kDivide:
      return _mm256_div_pd(a, b);
  }
  return a;
}

// One loop per operation (the switch outside it), so that each loop is
// only loads, the operation and a store.
template <AvxOperation kOperation>
int64_t SweepFloats(const float* self, const float* other, float number,
                    float* out, int64_t count) {
  const __m256 constant = _mm256_set1_ps(number);
  int64_t i = 0;
  if (other != nullptr) {
    for (; i + 8 <= count; i += 8) {
      _mm256_storeu_ps(out + i, Apply(kOperation, _mm256_loadu_ps(self + i),
                                      _mm256_loadu_ps(other + i)));
    }
  } else {
    for (; i + 8 <= count; i += 8) {
      _mm256_storeu_ps(out + i,
                       Apply(kOperation, _mm256_loadu_ps(self + i), constant));
    }
  }
  return i;
}

template <AvxOperation kOperation>
int64_t SweepDoubles(const double* self, const double* other, double number,
                     double* out, int64_t count) {
  const __m256d constant = _mm256_set1_pd(number);
  int64_t i = 0;
  if (other != nullptr) {
    for (; i + 4 <= count; i += 4) {
      _mm256_storeu_pd(out + i, Apply(kOperation, _mm256_loadu_pd(self + i),
                                      _mm256_loadu_pd(other + i)));
    }
  } else {
    for (; i + 4 <= count; i += 4) {
      _mm256_storeu_pd(out + i,
                       Apply(kOperation, _mm256_loadu_pd(self + i), constant));
    }
  }
  return i;
}

}  // namespace

int64_t SweepAvx(AvxOperation operation, const float* self, const float* other,
                 float number, float* out, int64_t count) {
  switch (operation) {
    case AvxOperation::kAdd:
      return SweepFloats<AvxOperation::kAdd>(self, other, number, out, count);
    case AvxOperation::kSubtract:
      return SweepFloats<AvxOperation::kSubtract>(self, other, number, out,
                                                  count);
    case AvxOperation::kMultiply:
      return SweepFloats<AvxOperation::kMultiply>(self, other, number, out,
                                                  count);
    case AvxOperation::kDivide:
      return SweepFloats<AvxOperation::kDivide>(self, other, number, out,
                                                count);
  }
  return 0;
}

int64_t SweepAvx(AvxOperation operation, const double* self,
                 const double* other, double number, double* out,
                 int64_t count) {
  switch (operation) {
    case AvxOperation::kAdd:
      return SweepDoubles<AvxOperation::kAdd>(self, other, number, out, count);
    case AvxOperation::kSubtract:
      return SweepDoubles<AvxOperation::kSubtract>(self, other, number, out,
                                                   count);
    case AvxOperation::kMultiply:
      return SweepDoubles<AvxOperation::kMultiply>(self, other, number, out,
                                                   count);
    case AvxOperation::kDivide:
      return SweepDoubles<AvxOperation::kDivide>(self, other, number, out,
                                                 count);
  }
  return 0;
}

bool NaNsMeetAvx(const float* a, const float* b, int64_t count,
                 int64_t* checked) {
  __m256 shared = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    const __m256 y = _mm256_loadu_ps(b + i);
    // Unordered with itself: a NaN.
    shared =
        _mm256_or_ps(shared, _mm256_and_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q),
                                           _mm256_cmp_ps(y, y, _CMP_UNORD_Q)));
  }
  *checked = i;
  return _mm256_movemask_ps(shared) != 0;
}

bool NaNsMeetAvx(const double* a, const double* b, int64_t count,
                 int64_t* checked) {
  __m256d shared = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const __m256d x = _mm256_loadu_pd(a + i);
    const __m256d y = _mm256_loadu_pd(b + i);
    shared =
        _mm256_or_pd(shared, _mm256_and_pd(_mm256_cmp_pd(x, x, _CMP_UNORD_Q),
                                           _mm256_cmp_pd(y, y, _CMP_UNORD_Q)));
  }
  *checked = i;
  return _mm256_movemask_pd(shared) != 0;
}

}  // namespace openreg::daemon
