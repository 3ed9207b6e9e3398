// The Work of one occl collective: NCCL's semantics on openreg streams. The
// collective ran on the group's communication stream, after an event that
// the work holds; wait() makes the caller's current stream wait for that
// event (the host does not block), as ProcessGroupNCCL's does.
#ifndef OPENREG_TORCH_BACKEND_DISTRIBUTED_OCCL_WORK_H_
#define OPENREG_TORCH_BACKEND_DISTRIBUTED_OCCL_WORK_H_

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace openreg::torch_backend {

class OcclWork : public c10d::Work {
 public:
  // `done` was recorded on the communication stream after the collective;
  // `future` completes with `outputs` in stream order (c10::ivalue::Future
  // with openreg devices); `description` names the collective in errors.
  OcclWork(int rank, c10d::OpType type, std::shared_ptr<c10::Event> done,
           std::vector<at::Tensor> outputs,
           c10::intrusive_ptr<c10::ivalue::Future> future,
           std::string description);

  bool isCompleted() override;
  bool isSuccess() const override;
  // The current stream waits for the collective; the host does not. A
  // collective already known to have failed raises DistBackendError.
  bool wait(std::chrono::milliseconds timeout) override;
  // The host waits for the collective; a failure raises DistBackendError.
  void synchronize() override;
  void blockCurrentStream() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  [[noreturn]] void ThrowFailure(const std::exception& error) const;

  std::shared_ptr<c10::Event> done_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::string description_;
};

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_DISTRIBUTED_OCCL_WORK_H_
