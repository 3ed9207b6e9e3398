// Sends one ATen op to the daemon on the current stream of a device.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_REMOTE_LAUNCH_H_
#define OPENREG_TORCH_BACKEND_KERNELS_REMOTE_LAUNCH_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <vector>

#include "protos/commands.pb.h"

namespace openreg::torch_backend {

// Enqueues `op(arguments)`; the daemon writes returned tensors into
// `outputs` (already allocated, in return order). Returns at once.
void LaunchAsync(const c10::OperatorHandle& op,
                 c10::ArrayRef<c10::IValue> arguments,
                 c10::ArrayRef<at::Tensor> outputs, c10::DeviceIndex device);

// Like LaunchAsync, but waits for the kernel: its errors are thrown here and
// its warnings returned. The first launch of each op signature is checked,
// so that everything the real kernel checks is raised at the call.
std::vector<c10::Warning> LaunchChecked(const c10::OperatorHandle& op,
                                        c10::ArrayRef<c10::IValue> arguments,
                                        c10::ArrayRef<at::Tensor> outputs,
                                        c10::DeviceIndex device);

// Runs `op(arguments)` in the daemon and waits; the daemon allocates the
// outputs. Kernel errors are thrown here.
proto::OpReply LaunchSync(const c10::OperatorHandle& op,
                          c10::ArrayRef<c10::IValue> arguments,
                          c10::DeviceIndex device);

// Host <-> device copies ordered on the device's current stream.
void CopyHostToDevice(void* device_dst, const void* host_src, size_t nbytes,
                      c10::DeviceIndex device);
void CopyDeviceToHost(void* host_dst, const void* device_src, size_t nbytes,
                      c10::DeviceIndex device);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_REMOTE_LAUNCH_H_
