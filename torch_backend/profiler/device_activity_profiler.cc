#include "torch_backend/profiler/device_activity_profiler.h"

#include <GenericTraceActivity.h>
#include <libkineto.h>  // CpuTraceBuffer
#include <time.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "openreg/launch.h"
#include "openreg/runtime.h"

namespace openreg::torch_backend {
namespace {

using libkineto::ActivityType;

// The correlation ids Kineto pushed on this thread (ops nest).
thread_local std::vector<uint64_t> t_correlation_ids;

int64_t ClockNanoseconds(clockid_t clock) {
  timespec now{};
  clock_gettime(clock, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

ActivityType KinetoType(proto::DeviceActivity::Kind kind) {
  switch (kind) {
    case proto::DeviceActivity::COPY:
      return ActivityType::GPU_MEMCPY;
    case proto::DeviceActivity::MEMSET:
      return ActivityType::GPU_MEMSET;
    default:  // kernels and collectives (CUDA's NCCL runs kernels too)
      return ActivityType::CONCURRENT_KERNEL;
  }
}

class DeviceActivitySession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    proto::TraceActivityReply reply;
    const Error error = TraceActivity(/*on=*/true, &reply);
    if (error != Error::kSuccess) {
      errors_.push_back(absl::StrCat(
          "openreg: the device timeline is not recorded: ", ErrorName(error),
          ": ", reply.status().message()));
      return;
    }
    tracing_ = true;
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (!tracing_) return;
    tracing_ = false;
    // Every command launched during the profile has run once the devices
    // are idle; the record then holds them all.
    int devices = 0;
    GetDeviceCount(&devices);
    int current = 0;
    GetDevice(&current);
    for (int device = 0; device < devices; ++device) {
      SetDevice(device);
      DeviceSynchronize();
    }
    SetDevice(current);
    proto::TraceActivityReply reply;
    const Error error = TraceActivity(/*on=*/false, &reply);
    // CLOCK_MONOTONIC (the daemon's) to the Unix time of the CPU events.
    unix_minus_monotonic_ns_ =
        ClockNanoseconds(CLOCK_REALTIME) - ClockNanoseconds(CLOCK_MONOTONIC);
    if (error != Error::kSuccess) {
      errors_.push_back(absl::StrCat(
          "openreg: reading the device timeline: ", ErrorName(error), ": ",
          reply.status().message()));
      return;
    }
    if (reply.dropped() > 0) {
      errors_.push_back(
          absl::StrCat("openreg: the device timeline holds the first ",
                       reply.activities_size(), " commands; ", reply.dropped(),
                       " later ones were not recorded"));
    }
    activities_.assign(reply.activities().begin(), reply.activities().end());
    status_ = libkineto::TraceStatus::READY;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity,
                    int64_t start_time, int64_t end_time) override {
    libkineto::TraceSpan span(start_time, end_time, "openreg");
    for (const proto::DeviceActivity& record : activities_) {
      libkineto::GenericTraceActivity activity(span, KinetoType(record.kind()),
                                               record.name());
      activity.startTime = record.start_ns() + unix_minus_monotonic_ns_;
      activity.endTime = record.end_ns() + unix_minus_monotonic_ns_;
      activity.device = record.device();
      activity.resource = static_cast<int32_t>(record.stream());
      const auto correlation = static_cast<int32_t>(record.correlation_id());
      activity.id = correlation;
      if (correlation != 0) {
        if (linked_activity) activity.linked = linked_activity(correlation);
        activity.flow.id = static_cast<uint32_t>(correlation);
        activity.flow.type = libkineto::kLinkAsyncCpuGpu;
        activity.flow.start = false;
      }
      activity.addMetadata("device", record.device());
      activity.addMetadata("stream", record.stream());
      activity.addMetadata("correlation", record.correlation_id());
      if (record.kind() == proto::DeviceActivity::COPY ||
          record.kind() == proto::DeviceActivity::MEMSET) {
        activity.addMetadata("bytes", record.bytes());
      }
      activity.log(logger);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{0, 0, "openreg", "openreg device"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::set<std::pair<int32_t, uint32_t>> streams;
    for (const proto::DeviceActivity& record : activities_) {
      streams.emplace(record.device(), record.stream());
    }
    std::vector<libkineto::ResourceInfo> resources;
    resources.reserve(streams.size());
    for (const auto& [device, stream] : streams) {
      resources.push_back(libkineto::ResourceInfo{
          stream, stream, device, absl::StrCat("openreg stream ", stream)});
    }
    return resources;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return nullptr;
  }

  void pushCorrelationId(uint64_t id) override {
    t_correlation_ids.push_back(id);
    SetCommandCorrelationId(id);
  }

  void popCorrelationId() override {
    if (!t_correlation_ids.empty()) t_correlation_ids.pop_back();
    SetCommandCorrelationId(
        t_correlation_ids.empty() ? 0 : t_correlation_ids.back());
  }

  ~DeviceActivitySession() override {
    if (tracing_) {
      proto::TraceActivityReply ignored;
      TraceActivity(/*on=*/false, &ignored);
    }
    SetCommandCorrelationId(0);
  }

 private:
  bool tracing_ = false;
  int64_t unix_minus_monotonic_ns_ = 0;
  std::vector<proto::DeviceActivity> activities_;
  std::vector<std::string> errors_;
};

}  // namespace

const std::string& DeviceActivityProfiler::name() const {
  static const std::string kName = "openreg";
  return kName;
}

const std::set<ActivityType>& DeviceActivityProfiler::availableActivities()
    const {
  static const std::set<ActivityType> kTypes = {ActivityType::CONCURRENT_KERNEL,
                                                ActivityType::GPU_MEMCPY,
                                                ActivityType::GPU_MEMSET};
  return kTypes;
}

std::unique_ptr<libkineto::IActivityProfilerSession>
DeviceActivityProfiler::configure(const std::set<ActivityType>& activity_types,
                                  const libkineto::Config&) {
  for (ActivityType type : availableActivities()) {
    if (activity_types.count(type) > 0) {
      return std::make_unique<DeviceActivitySession>();
    }
  }
  return nullptr;
}

std::unique_ptr<libkineto::IActivityProfilerSession>
DeviceActivityProfiler::configure(int64_t, int64_t,
                                  const std::set<ActivityType>& activity_types,
                                  const libkineto::Config& config) {
  return configure(activity_types, config);
}

REGISTER_PRIVATEUSE1_PROFILER(DeviceActivityProfiler);

}  // namespace openreg::torch_backend
