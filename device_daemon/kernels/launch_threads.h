// The intra-op thread count a launch runs with.
//
// A launch carries its client's count (KernelSettings.intra_op_threads) so
// that a kernel splits its work as CPU eager would and gives CPU's exact
// result. But in the daemon a parallel region must wake an OpenMP worker
// that shares the cores with the client's Python: on a 2-core VM, 2-thread
// kernels ran 3-20x slower than CPU eager's when small and no faster than
// on one thread when large (docs/ARCHITECTURE.md, "The cost of one op").
// So a launch runs on one thread wherever that cannot change its result:
//
// - Pointwise ops (at::Tag::pointwise): each output element is computed
//   from its own inputs, however the range is split. So are the foreach
//   forms of pointwise ops (an optimizer step's `_foreach_addcdiv_`).
// - Any op whose every tensor has at most at::internal::GRAIN_SIZE
//   elements: ATen's parallel_for and parallel_reduce run the whole range
//   inline below it. Except the ops whose libraries choose their own split
//   by thread count at any size: BLAS (MKL's gemm gave other bits on one
//   thread than on two for a 10x32 by 32x64 product), oneDNN's
//   convolutions, MKL's FFT, LAPACK, embedding_bag's per-thread buffers,
//   and layer norm's backward (per-thread buffers for the weight's and
//   bias's gradients).
//
// Everything else (large reductions, matrix products, convolutions, ...)
// runs with the client's count, or one fewer while the client is busy
// where a probe found the same bits (core_sharing.h).
// tests/python/test_launch_threads.py checks the choice and that results
// are CPU's bits at the client's count.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_THREADS_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_THREADS_H_

#include <cstdint>

#include "device_daemon/kernels/op_table.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

// The most elements of any tensor of `op` (arguments, tensor lists and
// outputs); INT64_MAX for a sparse argument (never run on fewer threads
// than asked).
int64_t LargestTensorElements(const proto::LaunchOp& op);

// Whether `op`'s library splits its work by thread count at any size.
bool SplitsAtAnySize(const proto::LaunchOp& op);

// `requested` (the client's count, >= 1), or 1 where one thread gives the
// same result (see above). `resolved` may be null (an unknown op: its
// launch fails anyway).
int LaunchIntraOpThreads(const proto::LaunchOp& op, const ResolvedOp* resolved,
                         int requested);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_LAUNCH_THREADS_H_
