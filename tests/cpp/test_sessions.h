// Sessions of this process for daemon tests that drive sessions directly
// (no attach socket): the same identity and limits in every suite.
#ifndef OPENREG_TESTS_CPP_TEST_SESSIONS_H_
#define OPENREG_TESTS_CPP_TEST_SESSIONS_H_

#include <cstdint>
#include <memory>

#include "device_daemon/devices/devices.h"
#include "device_daemon/execution/command_executor.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {

// Limits small enough for tests to exhaust: 8 streams, 16 events, 64 KiB
// rings and reply areas, 1 MiB of staging.
SessionLimits SmallSessionLimits();

// A session of this process (its pid, uid and gid) with id `id` (token
// 1000 + id). `executor` may be null (no stream workers).
std::unique_ptr<Session> MakeTestSession(
    uint64_t id, Devices* devices, CommandExecutor* executor,
    const SessionLimits& limits = SmallSessionLimits());

}  // namespace openreg::daemon

#endif  // OPENREG_TESTS_CPP_TEST_SESSIONS_H_
