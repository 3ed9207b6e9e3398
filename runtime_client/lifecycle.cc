// Connection lifecycle of the public API (runtime.h): Init, Shutdown and
// where the daemon is looked for.
#include "openreg/runtime.h"
#include "runtime_client/client.h"
#include "runtime_client/daemon_locator.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The runtime API is openreg::; its machinery is openreg::client::.
using client::Client;
using client::ResolveSocketPath;
using client::ReturnStatus;
using client::Session;
using client::SetConfiguredDaemonBinary;
using client::WithSession;

std::string DaemonSocketPath() { return ResolveSocketPath(); }

Error Init() {
  return ReturnStatus(WithSession([](Session&) { return absl::OkStatus(); }));
}

std::string DefaultSocketPath() { return ResolveSocketPath(); }

void SetDaemonBinary(const std::string& path) {
  SetConfiguredDaemonBinary(path);
}

bool IsConnected() {
  std::shared_ptr<Session> session = Client::Get().CurrentSession();
  return session != nullptr && session->CheckAlive().ok();
}

Error Shutdown() { return ReturnStatus(Client::Get().Shutdown()); }

bool InForkedChild() { return Client::Get().InForkedChild(); }

}  // namespace openreg
