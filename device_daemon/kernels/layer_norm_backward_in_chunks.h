// Layer norm's backward as ATen's CPU kernel computes it on N intra-op
// threads, computed on fewer.
//
// The kernel (aten/src/ATen/native/cpu/layer_norm_kernel.cpp) splits the
// rows in at::parallel_for's N chunks (ceil(rows / N) each), sums each
// chunk's weight and bias gradients in a buffer of its own, then adds the N
// buffers in order, from zero, in its accumulation type. So the gradients'
// bits depend on N (launch_threads.h), and on a 2-core host its 2-thread
// run took 5-8x its 1-thread time while the client's Python held the other
// core (docs/ARCHITECTURE.md, "The cost of one op"). Running the kernel on
// one thread once per chunk gives each chunk's buffer (plus zero) as that
// run's gradients; adding them in chunk order gives the N-thread sums when
// the buffers are in the accumulation type (float, double) and the input
// gradient is the same row by row. The chunks' kernels run side by side on
// the calling thread's intra-op threads (N - 1 for core_sharing.h), one
// thread each (base/openmp_parallel.h). Nothing here assumes it is exact:
// core_sharing.h uses this only for signatures whose probe found the same
// bits as the kernel on N threads.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_LAYER_NORM_BACKWARD_IN_CHUNKS_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_LAYER_NORM_BACKWARD_IN_CHUNKS_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace openreg::daemon {

// aten::native_layer_norm_backward (the functional overload).
bool IsLayerNormBackward(const c10::OperatorHandle& handle);

// Replaces `stack` (the op's arguments) by its results as the kernel
// computes them with `threads` intra-op threads, calling it once per row
// chunk on one thread, the chunks spread over the calling thread's
// intra-op threads. Kernel errors pass through.
void RunLayerNormBackwardInChunks(const c10::OperatorHandle& handle,
                                  torch::jit::Stack* stack, int threads);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_LAYER_NORM_BACKWARD_IN_CHUNKS_H_
