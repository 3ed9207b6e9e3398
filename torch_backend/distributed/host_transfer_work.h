// The Work of a send or recv between ranks of different daemons (hosts):
// gloo moves the data through host memory between the two processes.
// A send's host copy was taken before the transfer started, so only a
// recv has something left to do: copy what gloo received onto the device,
// once, on the stream of the caller that first sees the transfer finished
// (wait(), or is_completed() returning true), before it returns.
#ifndef OPENREG_TORCH_BACKEND_DISTRIBUTED_HOST_TRANSFER_WORK_H_
#define OPENREG_TORCH_BACKEND_DISTRIBUTED_HOST_TRANSFER_WORK_H_

#include <ATen/ATen.h>

#include <chrono>
#include <mutex>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace openreg::torch_backend {

class HostTransferWork : public c10d::Work {
 public:
  // `transfer` is gloo's send or recv of `host`; a recv's `device` (an
  // openreg tensor) receives `host` when it completes (undefined: a send).
  HostTransferWork(int rank, c10d::OpType type,
                   c10::intrusive_ptr<c10d::Work> transfer, at::Tensor host,
                   at::Tensor device);

  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;

 private:
  void DeliverOnce();

  c10::intrusive_ptr<c10d::Work> transfer_;
  at::Tensor host_;
  at::Tensor device_;
  std::once_flag delivered_;
};

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_DISTRIBUTED_HOST_TRANSFER_WORK_H_
