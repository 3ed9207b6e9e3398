// openreg's device timeline in torch.profiler: a Kineto IActivityProfiler
// registered with REGISTER_PRIVATEUSE1_PROFILER (torch 2.13's route for a
// PrivateUse1 backend's device activity, torch/csrc/profiler/standalone/
// privateuse1_profiler.h).
//
// While a profile that asks for ProfilerActivity.PrivateUse1 runs, the
// session stamps each CPU op's correlation id (Kineto's pushCorrelationId,
// on the op's thread) on every command the thread submits, and the daemon
// records when each kernel, copy, memset and collective of the session ran
// (protos/control.proto TraceActivity). At stop the session waits for the
// devices, takes the record and gives Kineto one activity per command: on
// the device's timeline (device = openreg index, resource = stream slot),
// with the daemon's start and end moved from CLOCK_MONOTONIC to the Unix
// time of the CPU events, linked to the CPU op that launched it. Kineto
// and torch then put them in export_chrome_trace and in key_averages()'s
// device-time columns. docs/OBSERVABILITY.md, "Device activity in
// torch.profiler".
#ifndef OPENREG_TORCH_BACKEND_PROFILER_DEVICE_ACTIVITY_PROFILER_H_
#define OPENREG_TORCH_BACKEND_PROFILER_DEVICE_ACTIVITY_PROFILER_H_

#include <IActivityProfiler.h>

#include <memory>
#include <set>
#include <string>

namespace openreg::torch_backend {

class DeviceActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override;
  const std::set<libkineto::ActivityType>& availableActivities() const override;
  // Null when none of the requested types is the device's (a CPU-only
  // profile): openreg then stays out of the way.
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override;
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t ts_ms, int64_t duration_ms,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override;
};

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_PROFILER_DEVICE_ACTIVITY_PROFILER_H_
