// A graph's recorded launch as one replay decoded it, kept for the next
// replays (docs/GRAPHS.md, "What a replay costs"): the kernel's argument
// stack and the CPU tensors over session memory it names, so that a
// replay decodes nothing and checks nothing per argument.
//
// Contract:
//  - Valid while the session's memory generation is the one it was
//    decoded at (Session::memory_generation: nothing freed since, so every
//    reference checked then still holds) and every buffer it names lives.
//  - At rest it pins nothing (weak references): a free returns memory as
//    it would without graphs. A run pins its buffers from Acquire to
//    Release, as a decoder's pins do.
//  - A run that changed a kept tensor's metadata (a resize, an in-place
//    view op) spoils it: Verify says so, and the launch decodes again.
//  - Kept only for launches whose every written argument is device memory
//    (Keepable): a host tensor the kernel wrote would carry over.
//  - One run at a time (the graph's replay cache lock).
//  - A launch a plain loop computes bit for bit keeps that loop too
//    (pointwise_kernel.h): its replays skip ATen altogether.
#ifndef OPENREG_DEVICE_DAEMON_KERNELS_DECODED_LAUNCH_H_
#define OPENREG_DEVICE_DAEMON_KERNELS_DECODED_LAUNCH_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>
#include <c10/core/RefcountedDeleter.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "device_daemon/execution/op_runner.h"
#include "device_daemon/kernels/pointwise_kernel.h"
#include "device_daemon/memory/device_buffer.h"
#include "protos/commands.pb.h"

namespace openreg::daemon {

class Session;

class DecodedLaunch : public PreparedLaunch {
 public:
  explicit DecodedLaunch(uint64_t memory_generation)
      : memory_generation_(memory_generation) {}
  ~DecodedLaunch() override;
  DecodedLaunch(const DecodedLaunch&) = delete;
  DecodedLaunch& operator=(const DecodedLaunch&) = delete;

  // ---- Recording (the decoder of the run that decodes) -----------------
  void KeepStack(const torch::jit::Stack& stack) { stack_ = stack; }
  void KeepTensor(const proto::TensorRef* ref, bool growable,
                  const at::Tensor& tensor);
  // A decoder pin (LaunchDecoder::SharedPin) the kept tensors share; takes
  // a reference of its own.
  void KeepPin(c10::RefcountedDeleterContext* pin);
  // Whether every argument `schema` marks as written was decoded to a kept
  // device tensor.
  bool Keepable(const c10::FunctionSchema& schema) const;
  void KeepPointwise(const PointwiseKernel& kernel) { pointwise_ = kernel; }

  // ---- Replaying -------------------------------------------------------
  // Pins every buffer for this run; false when one is gone or the session
  // freed memory since the decode (then decode again).
  bool Acquire(const Session& session);
  // Unpins; every run, recorded or replayed, ends with it.
  void Release();
  const torch::jit::Stack& stack() const { return stack_; }
  // The tensor kept for `ref` (decoded `growable` or not), or null.
  const at::Tensor* FindTensor(const proto::TensorRef* ref,
                               bool growable) const;
  // Every kept tensor still has the data, sizes, strides and offset it was
  // decoded with.
  bool Verify() const;
  // The loop that replays this launch without ATen, or null.
  const PointwiseKernel* pointwise() const {
    return pointwise_.has_value() ? &*pointwise_ : nullptr;
  }

 private:
  struct KeptTensor {
    const proto::TensorRef* ref;
    bool growable;
    at::Tensor tensor;
    const void* data;
  };
  struct KeptPin {
    c10::RefcountedDeleterContext* context;  // holds a shared_ptr pin
    std::weak_ptr<DeviceBuffer> buffer;
  };
  static std::shared_ptr<DeviceBuffer>& Held(const KeptPin& pin);

  const uint64_t memory_generation_;
  torch::jit::Stack stack_;
  absl::InlinedVector<KeptTensor, 4> tensors_;
  absl::InlinedVector<KeptPin, 2> pins_;
  std::optional<PointwiseKernel> pointwise_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_KERNELS_DECODED_LAUNCH_H_
