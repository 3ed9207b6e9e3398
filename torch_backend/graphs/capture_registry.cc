#include "torch_backend/graphs/capture_registry.h"

#include <atomic>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "openreg/graphs.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/graphs/graph_impl.h"

namespace openreg::torch_backend {
namespace {

struct ActiveCapture {
  GraphImpl* graph = nullptr;
  PoolId pool = 0;
};

struct Captures {
  std::mutex mutex;
  absl::flat_hash_map<uint64_t, ActiveCapture> active;
  std::atomic<int> count{0};
};

Captures& AllCaptures() {
  static auto* captures = new Captures;
  return *captures;
}

// The capture of the current stream of `device`, if any.
std::optional<ActiveCapture> CurrentCapture(c10::DeviceIndex device) {
  if (!AnyCaptureActive()) return std::nullopt;
  const uint64_t capture =
      StreamCaptureId(static_cast<StreamId>(CurrentStream(device).id()));
  if (capture == 0) return std::nullopt;
  Captures& captures = AllCaptures();
  std::lock_guard<std::mutex> lock(captures.mutex);
  auto found = captures.active.find(capture);
  if (found == captures.active.end()) return std::nullopt;
  return found->second;
}

}  // namespace

bool AnyCaptureActive() {
  return AllCaptures().count.load(std::memory_order_acquire) != 0;
}

void RegisterCapture(uint64_t capture, GraphImpl* graph, PoolId pool) {
  Captures& captures = AllCaptures();
  std::lock_guard<std::mutex> lock(captures.mutex);
  captures.active[capture] = {graph, pool};
  captures.count.store(static_cast<int>(captures.active.size()),
                       std::memory_order_release);
}

void UnregisterCapture(uint64_t capture) {
  Captures& captures = AllCaptures();
  std::lock_guard<std::mutex> lock(captures.mutex);
  captures.active.erase(capture);
  captures.count.store(static_cast<int>(captures.active.size()),
                       std::memory_order_release);
}

bool CurrentStreamCaptures(c10::DeviceIndex device) {
  return AnyCaptureActive() &&
         StreamCaptureId(static_cast<StreamId>(CurrentStream(device).id())) !=
             0;
}

std::optional<PoolId> CapturePoolOf(c10::DeviceIndex device) {
  const std::optional<ActiveCapture> capture = CurrentCapture(device);
  if (!capture.has_value()) return std::nullopt;
  return capture->pool;
}

std::optional<GeneratorDraw> CaptureDraw(GeneratorImpl* generator,
                                         c10::DeviceIndex device) {
  const std::optional<ActiveCapture> capture = CurrentCapture(device);
  if (!capture.has_value()) return std::nullopt;
  return capture->graph->RecordDraw(generator);
}

}  // namespace openreg::torch_backend
