#include "torch_backend/graphs/graph_impl.h"

#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <fstream>
#include <memory>
#include <utility>

#include "openreg/runtime.h"
#include "torch_backend/device_allocator.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/graphs/capture_registry.h"
#include "torch_backend/ignored_error.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

// torch's modes to the runtime's; Default is CUDA's default, global.
CaptureMode RuntimeMode(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::ThreadLocal:
      return CaptureMode::kThreadLocal;
    case at::GraphCaptureMode::Relaxed:
      return CaptureMode::kRelaxed;
    case at::GraphCaptureMode::Default:
    case at::GraphCaptureMode::Global:
      break;
  }
  return CaptureMode::kGlobal;
}

c10::DeviceIndex CurrentDeviceIndex() {
  int device = 0;
  OPENREG_CHECK(GetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

}  // namespace

GraphImpl::GraphImpl(const at::GraphImplArgs& /*args*/) {}

GraphImpl::~GraphImpl() {
  try {
    reset();
  } catch (const std::exception& error) {
    // The daemon may be gone; its session's end frees the graph anyway.
    TORCH_WARN("openreg: freeing a graph failed: ", error.what());
  }
}

void GraphImpl::CheckNoGraph(const char* call) const {
  TORCH_CHECK(graph_ == 0 && capture_id_ == 0, "openreg: ", call,
              ": this graph already holds a capture; call reset() first, or "
              "use a new graph");
}

void GraphImpl::capture_begin(at::MempoolId_t pool,
                              at::GraphCaptureMode capture_mode) {
  CheckNoGraph("capture_begin");
  TORCH_CHECK(pool.first == 0 || pool.second == 0,
              "openreg: capture_begin: unknown pool id (", pool.first, ", ",
              pool.second,
              "); pass graph_pool_handle(), another graph's pool() or None");
  device_ = CurrentDeviceIndex();
  capture_stream_ = static_cast<StreamId>(CurrentStream(device_).id());
  DeviceAllocator& allocator = GetDeviceAllocator();
  PoolId id = pool.first != 0 ? pool.first : pool.second;
  if (id == 0) id = allocator.NewPoolId();
  allocator.RetainPool(id);
  const Error begun =
      StreamBeginCapture(capture_stream_, RuntimeMode(capture_mode));
  if (begun != Error::kSuccess) {
    allocator.ReleasePool(id);
    ThrowRuntimeError(begun, "capture_begin");
  }
  pool_ = id;
  holds_pool_ = true;
  capture_id_ = StreamCaptureId(capture_stream_);
  RegisterCapture(capture_id_, this, pool_);
}

void GraphImpl::capture_end() {
  TORCH_CHECK(capture_id_ != 0,
              "openreg: capture_end: this graph is not capturing (call "
              "capture_begin first)");
  uint32_t generators = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generators = static_cast<uint32_t>(generators_.size());
  }
  GraphId graph = 0;
  const Error ended = StreamEndCapture(capture_stream_, generators, &graph);
  UnregisterCapture(capture_id_);
  capture_id_ = 0;
  if (ended != Error::kSuccess) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      generators_.clear();
    }
    GetDeviceAllocator().ReleasePool(pool_);
    holds_pool_ = false;
    ThrowRuntimeError(ended, "capture_end");
  }
  graph_ = graph;
}

void GraphImpl::instantiate() {
  TORCH_CHECK(graph_ != 0,
              "openreg: instantiate: nothing was captured (capture_begin and "
              "capture_end first)");
}

void GraphImpl::replay() {
  TORCH_CHECK(graph_ != 0,
              "openreg: replay: nothing was captured (capture_begin and "
              "capture_end first, and not reset since)");
  std::vector<RegisteredGenerator> generators;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generators = generators_;
  }
  // As CUDA's philox registration: each replay takes the generator's
  // current offset and advances it past everything the capture drew.
  std::vector<proto::GeneratorState> draws;
  draws.reserve(generators.size());
  for (const RegisteredGenerator& registered : generators) {
    auto* generator = static_cast<GeneratorImpl*>(registered.generator.get());
    std::lock_guard<std::mutex> lock(generator->mutex_);
    proto::GeneratorState& draw = draws.emplace_back();
    draw.set_seed(generator->current_seed());
    draw.set_offset(generator->get_offset());
    generator->set_offset(draw.offset() + registered.increment);
  }
  OPENREG_CHECK(GraphLaunch(
      graph_, static_cast<StreamId>(CurrentStream(device_).id()), draws));
}

void GraphImpl::reset() {
  if (capture_id_ != 0) {
    // An abandoned capture: end it and drop what it recorded.
    GraphId discarded = 0;
    IgnoreError(StreamEndCapture(capture_stream_, 0, &discarded),
                "a capture abandoned by reset()");
    UnregisterCapture(capture_id_);
    capture_id_ = 0;
    if (discarded != 0) graph_ = discarded;
  }
  if (graph_ != 0) {
    const GraphId graph = graph_;
    graph_ = 0;
    const Error destroyed = GraphDestroy(graph);
    if (destroyed != Error::kSuccess && destroyed != Error::kDeviceLost &&
        destroyed != Error::kDaemonUnavailable) {
      ThrowRuntimeError(destroyed, "reset");
    }
    IgnoreError(destroyed, "the daemon is gone, and its graphs with it");
  }
  if (holds_pool_) {
    GetDeviceAllocator().ReleasePool(pool_);
    holds_pool_ = false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  generators_.clear();
}

at::MempoolId_t GraphImpl::pool() const {
  return {0, static_cast<c10::CaptureId_t>(pool_)};
}

void GraphImpl::enable_debug_mode() { debug_mode_ = true; }

void GraphImpl::debug_dump(const std::string& path) {
  TORCH_CHECK(graph_ != 0,
              "openreg: debug_dump: nothing was captured (capture first)");
  std::string text;
  OPENREG_CHECK(GraphDescribe(graph_, &text));
  std::ofstream file(path);
  TORCH_CHECK(file.good(), "openreg: debug_dump: cannot write ", path);
  file << text;
}

GeneratorDraw GraphImpl::RecordDraw(GeneratorImpl* generator) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t index = 0;
  while (index < generators_.size() &&
         generators_[index].generator.get() != generator) {
    ++index;
  }
  if (index == generators_.size()) {
    generators_.push_back(
        {c10::intrusive_ptr<c10::GeneratorImpl>::reclaim_copy(generator), 0});
  }
  GeneratorDraw draw;
  draw.offset = generators_[index].increment++;
  draw.graph_generator = static_cast<uint32_t>(index + 1);
  return draw;
}

void RegisterGraphImpl() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::GraphImplRegistry()->Register(
        c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false),
        [](const at::GraphImplArgs& args)
            -> std::unique_ptr<at::GraphImplInterface> {
          return std::make_unique<GraphImpl>(args);
        });
  });
}

PoolId NewGraphPoolId() { return GetDeviceAllocator().NewPoolId(); }

}  // namespace openreg::torch_backend
