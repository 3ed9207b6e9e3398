#include "torch_backend/distributed/host_transfer_work.h"

#include <utility>

namespace openreg::torch_backend {

HostTransferWork::HostTransferWork(int rank, c10d::OpType type,
                                   c10::intrusive_ptr<c10d::Work> transfer,
                                   at::Tensor host, at::Tensor device)
    : c10d::Work(rank, type),
      transfer_(std::move(transfer)),
      host_(std::move(host)),
      device_(std::move(device)) {}

void HostTransferWork::DeliverOnce() {
  std::call_once(delivered_, [this] {
    if (device_.defined()) device_.copy_(host_);
  });
}

bool HostTransferWork::isCompleted() {
  if (!transfer_->isCompleted()) return false;
  if (transfer_->isSuccess()) DeliverOnce();
  return true;
}

bool HostTransferWork::isSuccess() const { return transfer_->isSuccess(); }

bool HostTransferWork::wait(std::chrono::milliseconds timeout) {
  // gloo raises its own error (naming the peer) when the transfer failed.
  const bool done = transfer_->wait(timeout);
  DeliverOnce();
  return done;
}

std::vector<at::Tensor> HostTransferWork::result() {
  if (device_.defined()) return {device_};
  return {};
}

}  // namespace openreg::torch_backend
