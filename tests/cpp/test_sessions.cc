#include "tests/cpp/test_sessions.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace openreg::daemon {

SessionLimits SmallSessionLimits() {
  SessionLimits limits;
  limits.max_streams = 8;
  limits.max_events = 16;
  limits.ring_bytes = 64 * 1024;
  limits.reply_bytes = 64 * 1024;
  limits.staging_bytes = 1 << 20;
  return limits;
}

std::unique_ptr<Session> MakeTestSession(uint64_t id, Devices* devices,
                                         CommandExecutor* executor,
                                         const SessionLimits& limits) {
  SessionIdentity identity;
  identity.id = id;
  identity.token = 1000 + id;
  identity.peer = PeerCredentials{getpid(), getuid(), getgid()};
  absl::StatusOr<std::unique_ptr<Session>> session =
      Session::Create(identity, devices, executor, limits);
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? *std::move(session) : nullptr;
}

}  // namespace openreg::daemon
