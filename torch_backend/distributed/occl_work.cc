#include "torch_backend/distributed/occl_work.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <utility>

namespace openreg::torch_backend {

OcclWork::OcclWork(int rank, c10d::OpType type,
                   std::shared_ptr<c10::Event> done,
                   std::vector<at::Tensor> outputs,
                   c10::intrusive_ptr<c10::ivalue::Future> future,
                   std::string description)
    : c10d::Work(rank, type),
      done_(std::move(done)),
      outputs_(std::move(outputs)),
      future_(std::move(future)),
      description_(std::move(description)) {}

void OcclWork::ThrowFailure(const std::exception& error) const {
  C10_THROW_ERROR(DistBackendError,
                  description_ + " failed: " + std::string(error.what()));
}

bool OcclWork::isCompleted() {
  try {
    return done_->query();
  } catch (const std::exception& error) {
    ThrowFailure(error);
  }
}

bool OcclWork::isSuccess() const {
  try {
    return done_->query();
  } catch (const std::exception&) {
    return false;
  }
}

void OcclWork::blockCurrentStream() {
  const c10::impl::VirtualGuardImpl guard(c10::DeviceType::PrivateUse1);
  done_->block(guard.getStream(done_->device()));
}

bool OcclWork::wait(std::chrono::milliseconds /*timeout*/) {
  // A failure already recorded surfaces here; one still to come surfaces
  // at the next synchronization of a stream that waits for it.
  try {
    done_->query();
  } catch (const std::exception& error) {
    ThrowFailure(error);
  }
  blockCurrentStream();
  return true;
}

void OcclWork::synchronize() {
  try {
    done_->synchronize();
  } catch (const std::exception& error) {
    ThrowFailure(error);
  }
}

std::vector<at::Tensor> OcclWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> OcclWork::getFuture() {
  return future_;
}

}  // namespace openreg::torch_backend
