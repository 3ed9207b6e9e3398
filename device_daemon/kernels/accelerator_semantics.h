// Where PyTorch's device-generic semantics for an accelerator differ from
// CPU's kernels, the daemon (whose kernels are CPU's) takes CUDA's, the
// reference accelerator, by replacing those CPU kernels in its own
// dispatcher (the daemon runs no CPU tensors of its own):
//
// - Integer fmod and remainder by zero: CPU raises "ZeroDivisionError";
//   CUDA's kernels (BinaryRemainderKernel.cu) have no check and give the
//   hardware's answer, all bits set (-1; 255 in uint8) and, for int64, 2^32
//   - 1 where the dividend is non-negative. PyTorch's
//   test_fmod_remainder_by_zero_integral expects these of every non-CPU
//   device. A raise would also reach the client only at its next
//   synchronization (kernels run asynchronously), never at the call.
// - ComplexHalf pow: CPU has no kernel ("not implemented for
//   'ComplexHalf'"); CUDA computes it in complex<float> and rounds
//   (PowKernel.cu), as here.
//
// Everything else runs CPU's kernel unchanged.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_ACCELERATOR_SEMANTICS_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_ACCELERATOR_SEMANTICS_H_

namespace openreg::daemon {

// Registers the replacements; once, before the daemon serves clients.
void RegisterAcceleratorSemantics();

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_ACCELERATOR_SEMANTICS_H_
