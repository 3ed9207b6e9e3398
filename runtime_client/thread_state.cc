#include "runtime_client/thread_state.h"

#include "runtime_client/status_util.h"

namespace openreg::client {
namespace {

// The current device is read on every op: a trivially constructible
// thread_local of its own needs no initialization guard on each access,
// which the error state (a std::string) does.
thread_local int current_device = 0;

struct ThreadState {
  Error last_error = Error::kSuccess;
  std::string last_error_message;
};

ThreadState& State() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

int CurrentDevice() { return current_device; }

void SetCurrentDevice(int device) { current_device = device; }

Error ReturnStatus(const absl::Status& status) {
  const Error error = ErrorOf(status);
  if (error != Error::kSuccess && error != Error::kNotReady) {
    ThreadState& state = State();
    state.last_error = error;
    state.last_error_message = std::string(status.message());
  }
  return error;
}

Error TakeLastError() {
  ThreadState& state = State();
  const Error error = state.last_error;
  state.last_error = Error::kSuccess;
  return error;
}

Error PeekLastError() { return State().last_error; }

std::string LastErrorMessage() { return State().last_error_message; }

}  // namespace openreg::client
