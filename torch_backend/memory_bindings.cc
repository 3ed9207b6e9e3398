#include "torch_backend/memory_bindings.h"

#include <pybind11/stl.h>
#include <torch/csrc/Export.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "torch_backend/block_cache.h"
#include "torch_backend/device_allocator.h"
#include "torch_backend/host_allocator.h"

// Declared as in torch/csrc/profiler/python/combined_traceback.h (exported
// by libtorch_python), whose header needs nlohmann/json, which the wheel
// does not ship.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(
    std::vector<CapturedTraceback*>& to_symbolize);
TORCH_PYTHON_API void freeDeadCapturedTracebackFrames();
TORCH_PYTHON_API void installCapturedTracebackPython();
}  // namespace torch

namespace openreg::torch_backend {
namespace {

namespace py = pybind11;

// Stacks come from torch's CapturedTraceback, the same capture CUDA's
// allocator uses: its header and symbols (libtorch_cpu, libtorch_python)
// are usable from this extension, it is cheap (frames are symbolized only
// when a snapshot is taken), and py_symbolize turns it into exactly the
// frame dicts ({filename, line, name}) PyTorch's memory visualizer reads.
std::shared_ptr<c10::GatheredContext> GatherPython() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true,
                                          /*cpp=*/false);
}

std::shared_ptr<c10::GatheredContext> GatherAll() {
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true,
                                          /*cpp=*/true);
}

const char* ActionName(TraceAction action) {
  switch (action) {
    case TraceAction::kAlloc:
      return "alloc";
    case TraceAction::kFreeRequested:
      return "free_requested";
    case TraceAction::kFreeCompleted:
      return "free_completed";
    case TraceAction::kSegmentAlloc:
      return "segment_alloc";
    case TraceAction::kSegmentFree:
      return "segment_free";
    case TraceAction::kOom:
      return "oom";
  }
  return "unknown";
}

// Frames are symbolized in one batch (frames shared between stacks are
// symbolized once), then put into the dicts that asked for them.
class FrameCollector {
 public:
  void Add(const py::dict& target,
           const std::shared_ptr<c10::GatheredContext>& context) {
    auto* traceback = dynamic_cast<torch::CapturedTraceback*>(context.get());
    if (traceback == nullptr) {
      target["frames"] = py::list();
      return;
    }
    tracebacks_.push_back(traceback);
    targets_.push_back(target);
  }
  void Fill() {
    std::vector<py::object> frames = torch::py_symbolize(tracebacks_);
    for (size_t i = 0; i < frames.size(); ++i) {
      targets_[i]["frames"] = frames[i];
    }
  }

 private:
  std::vector<torch::CapturedTraceback*> tracebacks_;
  std::vector<py::dict> targets_;
};

// torch.cuda.memory._snapshot()'s dict: "segments" (each with its
// "blocks") and "device_traces" (one event list per device).
py::dict Snapshot(int device_count) {
  // Copied under each cache's lock; Python objects are built after.
  const auto snapshots = GetDeviceAllocator().Snapshots();
  torch::freeDeadCapturedTracebackFrames();
  FrameCollector frames;
  py::list segments;
  py::list device_traces;
  for (int device = 0; device < device_count; ++device) {
    device_traces.append(py::list());
  }
  for (const auto& [device, snapshot] : snapshots) {
    for (const SegmentState& segment : snapshot.segments) {
      py::dict entry;
      entry["device"] = static_cast<int>(device);
      entry["address"] = segment.address;
      entry["total_size"] = segment.total_size;
      entry["stream"] = segment.stream;
      entry["segment_type"] = segment.small ? "small" : "large";
      entry["segment_pool_id"] = py::make_tuple(0, segment.pool);
      entry["is_expandable"] = false;
      entry["frames"] = py::list();
      size_t allocated = 0;
      size_t active = 0;
      size_t requested = 0;
      py::list blocks;
      for (const BlockState& block : segment.blocks) {
        py::dict info;
        info["address"] = block.address;
        info["size"] = block.size;
        info["requested_size"] = block.requested_size;
        info["state"] = block.state;
        const std::string state = block.state;
        if (state == "active_allocated") allocated += block.size;
        if (state != "inactive") {
          active += block.size;
          requested += block.requested_size;
        }
        frames.Add(info, block.context);
        blocks.append(info);
      }
      entry["allocated_size"] = allocated;
      entry["active_size"] = active;
      entry["requested_size"] = requested;
      entry["blocks"] = blocks;
      segments.append(entry);
    }
    if (device >= device_count) continue;
    py::list trace = device_traces[device];
    for (const TraceEntry& event : snapshot.trace) {
      py::dict entry;
      entry["action"] = ActionName(event.action);
      entry["addr"] = event.addr;
      entry["size"] = event.size;
      entry["stream"] = event.stream;
      entry["time_us"] = event.time_us;
      if (event.action == TraceAction::kOom) {
        entry["device_free"] = event.device_free;
      }
      frames.Add(entry, event.context);
      trace.append(entry);
    }
  }
  frames.Fill();
  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = device_traces;
  result["allocator_settings"] = py::dict();
  return result;
}

py::dict StatDict(const c10::CachingAllocator::Stat& stat) {
  py::dict dict;
  dict["current"] = stat.current;
  dict["peak"] = stat.peak;
  dict["allocated"] = stat.allocated;
  dict["freed"] = stat.freed;
  return dict;
}

py::dict DurationDict(const c10::CachingAllocator::DurationStat& stat) {
  py::dict dict;
  dict["total"] = stat.total;
  dict["max"] = stat.max;
  dict["min"] = stat.min;
  dict["count"] = stat.count;
  dict["avg"] = stat.count == 0 ? 0 : stat.total / stat.count;
  return dict;
}

// torch.cuda.host_memory_stats_as_nested_dict()'s keys, from the same
// CachingHostAllocatorImpl CUDA's pinned memory uses.
py::dict HostMemoryStats() {
  const at::HostStats stats = GetHostAllocator().get_stats();
  py::dict result;
  result["active_requests"] = StatDict(stats.active_requests);
  result["active_bytes"] = StatDict(stats.active_bytes);
  result["allocations"] = StatDict(stats.allocations);
  result["allocated_bytes"] = StatDict(stats.allocated_bytes);
  result["host_alloc_time"] = DurationDict(stats.host_alloc_time);
  result["host_free_time"] = DurationDict(stats.host_free_time);
  result["num_host_alloc"] = stats.num_host_alloc;
  result["num_host_free"] = stats.num_host_free;
  return result;
}

}  // namespace

void RegisterMemoryBindings(py::module& m) {
  m.def(
      "_record_memory_history",
      [](bool frames, bool cpp_frames, bool frames_on_blocks,
         bool frames_on_alloc, bool frames_on_free, bool record_trace,
         size_t max_entries, bool clear, uint32_t skip_actions) {
        // Once per interpreter, with the GIL (held here): lets
        // CapturedTraceback see Python frames.
        static const bool installed = [] {
          torch::installCapturedTracebackPython();
          return true;
        }();
        (void)installed;
        HistorySettings settings;
        settings.gather =
            frames ? (cpp_frames ? &GatherAll : &GatherPython) : nullptr;
        settings.frames_on_blocks = frames && frames_on_blocks;
        settings.frames_on_alloc = frames && frames_on_alloc;
        settings.frames_on_free = frames && frames_on_free;
        settings.record_trace = record_trace;
        settings.max_entries = max_entries;
        settings.skip_actions = skip_actions;
        GetDeviceAllocator().RecordHistory(settings, clear);
        torch::freeDeadCapturedTracebackFrames();
      },
      py::arg("frames"), py::arg("cpp_frames"), py::arg("frames_on_blocks"),
      py::arg("frames_on_alloc"), py::arg("frames_on_free"),
      py::arg("record_trace"), py::arg("max_entries"), py::arg("clear"),
      py::arg("skip_actions"));
  m.def("_memory_snapshot", &Snapshot, py::arg("device_count"));
  m.def(
      "_caching_allocator_alloc",
      [](size_t size, int device, int64_t stream) {
        return reinterpret_cast<uintptr_t>(GetDeviceAllocator().RawAlloc(
            size, static_cast<c10::DeviceIndex>(device),
            static_cast<StreamId>(stream)));
      },
      py::arg("size"), py::arg("device"), py::arg("stream"));
  m.def(
      "_caching_allocator_delete",
      [](uintptr_t ptr) {
        GetDeviceAllocator().RawDelete(reinterpret_cast<void*>(ptr));
      },
      py::arg("ptr"));
  m.def("_host_memory_stats", &HostMemoryStats);
  m.def("_mem_pool_create", [] { return GetDeviceAllocator().CreatePool(); });
  m.def(
      "_mem_pool_set_thread_pool",
      [](int device, PoolId pool) {
        return GetDeviceAllocator().SetThreadPool(
            static_cast<c10::DeviceIndex>(device), pool);
      },
      py::arg("device"), py::arg("pool"));
  m.def(
      "_mem_pool_release",
      [](PoolId pool) { GetDeviceAllocator().ReleasePool(pool); },
      py::arg("pool"));
}

}  // namespace openreg::torch_backend
