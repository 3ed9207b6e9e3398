#include "device_daemon/kernels/pointwise_avx.h"

#include <immintrin.h>

namespace openreg::daemon {

bool CpuHasAvx() {
  static const bool has_avx = __builtin_cpu_supports("avx");
  return has_avx;
}

namespace {

// Eight floats or four doubles at a time, as SseLanes in
// pointwise_kernel.cc four or two.
template <typename T>
struct AvxLanes;

template <>
struct AvxLanes<float> {
  using Vector = __m256;
  static constexpr int kWidth = 8;
  static Vector Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, Vector v) { _mm256_storeu_ps(p, v); }
  static Vector Broadcast(float x) { return _mm256_set1_ps(x); }
  static Vector Add(Vector a, Vector b) { return _mm256_add_ps(a, b); }
  static Vector Subtract(Vector a, Vector b) { return _mm256_sub_ps(a, b); }
  static Vector Multiply(Vector a, Vector b) { return _mm256_mul_ps(a, b); }
  static Vector Divide(Vector a, Vector b) { return _mm256_div_ps(a, b); }
  static Vector And(Vector a, Vector b) { return _mm256_and_ps(a, b); }
  static Vector Or(Vector a, Vector b) { return _mm256_or_ps(a, b); }
  // All ones in a lane that holds a NaN (unordered with itself).
  static Vector IsNaN(Vector a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static bool Any(Vector mask) { return _mm256_movemask_ps(mask) != 0; }
};

template <>
struct AvxLanes<double> {
  using Vector = __m256d;
  static constexpr int kWidth = 4;
  static Vector Load(const double* p) { return _mm256_loadu_pd(p); }
  static void Store(double* p, Vector v) { _mm256_storeu_pd(p, v); }
  static Vector Broadcast(double x) { return _mm256_set1_pd(x); }
  static Vector Add(Vector a, Vector b) { return _mm256_add_pd(a, b); }
  static Vector Subtract(Vector a, Vector b) { return _mm256_sub_pd(a, b); }
  static Vector Multiply(Vector a, Vector b) { return _mm256_mul_pd(a, b); }
  static Vector Divide(Vector a, Vector b) { return _mm256_div_pd(a, b); }
  static Vector And(Vector a, Vector b) { return _mm256_and_pd(a, b); }
  static Vector Or(Vector a, Vector b) { return _mm256_or_pd(a, b); }
  static Vector IsNaN(Vector a) { return _mm256_cmp_pd(a, a, _CMP_UNORD_Q); }
  static bool Any(Vector mask) { return _mm256_movemask_pd(mask) != 0; }
};

template <typename T, AvxOperation kOperation>
typename AvxLanes<T>::Vector Apply(typename AvxLanes<T>::Vector a,
                                   typename AvxLanes<T>::Vector b) {
  using Lanes = AvxLanes<T>;
  switch (kOperation) {
    case AvxOperation::kAdd:
      return Lanes::Add(a, b);
    case AvxOperation::kSubtract:
      return Lanes::Subtract(a, b);
    case AvxOperation::kMultiply:
      return Lanes::Multiply(a, b);
    case AvxOperation::kDivide:
      return Lanes::Divide(a, b);
  }
  return a;
}

// One loop per operation and operand form (the choice made outside it),
// so that each loop is only its loads, the operation and a store.
template <typename T, AvxOperation kOperation>
int64_t Sweep(const T* self, const T* other, T number, T* out, int64_t count) {
  using Lanes = AvxLanes<T>;
  constexpr int kWidth = Lanes::kWidth;
  int64_t i = 0;
  if (other != nullptr) {
    for (; i + kWidth <= count; i += kWidth) {
      Lanes::Store(out + i, Apply<T, kOperation>(Lanes::Load(self + i),
                                                 Lanes::Load(other + i)));
    }
    return i;
  }
  const typename Lanes::Vector constant = Lanes::Broadcast(number);
  for (; i + kWidth <= count; i += kWidth) {
    Lanes::Store(out + i,
                 Apply<T, kOperation>(Lanes::Load(self + i), constant));
  }
  return i;
}

template <typename T>
int64_t SweepAs(AvxOperation operation, const T* self, const T* other, T number,
                T* out, int64_t count) {
  switch (operation) {
    case AvxOperation::kAdd:
      return Sweep<T, AvxOperation::kAdd>(self, other, number, out, count);
    case AvxOperation::kSubtract:
      return Sweep<T, AvxOperation::kSubtract>(self, other, number, out, count);
    case AvxOperation::kMultiply:
      return Sweep<T, AvxOperation::kMultiply>(self, other, number, out, count);
    case AvxOperation::kDivide:
      return Sweep<T, AvxOperation::kDivide>(self, other, number, out, count);
  }
  return 0;
}

template <typename T>
bool NaNsMeetAs(const T* a, const T* b, int64_t count, int64_t* checked) {
  using Lanes = AvxLanes<T>;
  typename Lanes::Vector shared = Lanes::Broadcast(0);
  int64_t i = 0;
  for (; i + Lanes::kWidth <= count; i += Lanes::kWidth) {
    shared = Lanes::Or(shared, Lanes::And(Lanes::IsNaN(Lanes::Load(a + i)),
                                          Lanes::IsNaN(Lanes::Load(b + i))));
  }
  *checked = i;
  return Lanes::Any(shared);
}

}  // namespace

int64_t SweepAvx(AvxOperation operation, const float* self, const float* other,
                 float number, float* out, int64_t count) {
  return SweepAs(operation, self, other, number, out, count);
}

int64_t SweepAvx(AvxOperation operation, const double* self,
                 const double* other, double number, double* out,
                 int64_t count) {
  return SweepAs(operation, self, other, number, out, count);
}

bool NaNsMeetAvx(const float* a, const float* b, int64_t count,
                 int64_t* checked) {
  return NaNsMeetAs(a, b, count, checked);
}

bool NaNsMeetAvx(const double* a, const double* b, int64_t count,
                 int64_t* checked) {
  return NaNsMeetAs(a, b, count, checked);
}

}  // namespace openreg::daemon
