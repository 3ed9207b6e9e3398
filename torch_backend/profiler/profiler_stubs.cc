// torch.profiler's legacy device timing for openreg
// (torch.autograd.profiler.profile(use_device="openreg"), the state
// KINETO_PRIVATEUSE1_FALLBACK): the ProfilerStubs that torch asks, at each
// op's start and end, for a device marker, and after the profile for the
// device time between two markers. Without them torch printed "PrivateUse1
// used in profiler but not enabled" with a stack trace for every op.
//
// A marker is (device, stream, last command submitted to it), taken without
// talking to the daemon. The device times come from the daemon's activity
// trace of the session (the one the Kineto profiler uses): the first marker
// of a profile turns it on, the first elapsed() after the profile turns it
// off and reads it once; the time between two markers is the daemon's run
// time of the stream's commands submitted between them. So an op costs no
// daemon round trip while the profile runs.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "openreg/launch.h"
#include "openreg/runtime.h"
#include "torch_backend/device_guard.h"

namespace openreg::torch_backend {
namespace {

struct DeviceMarker {
  int device = 0;
  StreamId stream = 0;
  uint64_t sequence = 0;  // the last command submitted to the stream
};

class OpenregProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device,
              torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    int current = 0;
    GetDevice(&current);
    if (device != nullptr) *device = static_cast<c10::DeviceIndex>(current);
    auto marker = std::make_shared<DeviceMarker>();
    marker->device = current;
    marker->stream = static_cast<StreamId>(
        CurrentStream(static_cast<c10::DeviceIndex>(current)).id());
    marker->sequence = LastSubmitted(marker->stream);
    StartTraceIfIdle();
    if (event != nullptr) *event = std::move(marker);
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
  }

  // Microseconds, as torch's other stubs return.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start_event,
                const torch::profiler::impl::ProfilerVoidEventStub* end_event)
      const override {
    const auto* start = static_cast<const DeviceMarker*>(start_event->get());
    const auto* end = static_cast<const DeviceMarker*>(end_event->get());
    if (start == nullptr || end == nullptr || start->device != end->device ||
        start->stream != end->stream) {
      return 0;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ReadTraceLocked();
    int64_t nanoseconds = 0;
    auto it =
        runs_.upper_bound({start->device, start->stream, start->sequence});
    for (; it != runs_.end(); ++it) {
      const auto& [device, stream, sequence] = it->first;
      if (device != end->device || stream != end->stream ||
          sequence > end->sequence) {
        break;
      }
      nanoseconds += it->second;
    }
    return static_cast<float>(nanoseconds) / 1000.0F;
  }

  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    int devices = 0;
    GetDeviceCount(&devices);
    int current = 0;
    GetDevice(&current);
    for (int device = 0; device < devices; ++device) {
      SetDevice(device);
      op(device);
    }
    SetDevice(current);
  }

  void synchronize() const override { DeviceSynchronize(); }

 private:
  void StartTraceIfIdle() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tracing_) return;
    proto::TraceActivityReply ignored;
    tracing_ = TraceActivity(/*on=*/true, &ignored) == Error::kSuccess;
    runs_.clear();
  }

  // After the profile: every device idle, then the record, once.
  void ReadTraceLocked() const {
    if (!tracing_) return;
    tracing_ = false;
    onEachDevice([](int) { DeviceSynchronize(); });
    proto::TraceActivityReply reply;
    if (TraceActivity(/*on=*/false, &reply) != Error::kSuccess) return;
    for (const proto::DeviceActivity& activity : reply.activities()) {
      runs_[{activity.device(), activity.stream(), activity.sequence()}] =
          activity.end_ns() - activity.start_ns();
    }
  }

  mutable std::mutex mutex_;
  mutable bool tracing_ = false;
  // Run time by (device, stream, sequence).
  mutable std::map<std::tuple<int, StreamId, uint64_t>, int64_t> runs_;
};

struct RegisterStubs {
  RegisterStubs() {
    static OpenregProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
const RegisterStubs register_stubs;

}  // namespace
}  // namespace openreg::torch_backend
