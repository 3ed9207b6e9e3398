// The captures this process's openreg graphs run (docs/GRAPHS.md), by the
// runtime's capture id: where the caching allocator puts allocations of
// capturing streams (the graph's private pool) and how random ops draw
// while captured (graph-relative offsets of registered generators). The
// allocator and the generator ask it only while a capture is active.
#ifndef OPENREG_TORCH_BACKEND_GRAPHS_CAPTURE_REGISTRY_H_
#define OPENREG_TORCH_BACKEND_GRAPHS_CAPTURE_REGISTRY_H_

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

#include "torch_backend/block_cache.h"
#include "torch_backend/generator.h"

namespace openreg::torch_backend {

class GraphImpl;

// True while some graph of this process captures (one relaxed load).
bool AnyCaptureActive();

// `graph` captures as runtime capture `capture`, allocating from `pool`.
void RegisterCapture(uint64_t capture, GraphImpl* graph, PoolId pool);
void UnregisterCapture(uint64_t capture);

// True when the current stream of `device` records into a capture.
bool CurrentStreamCaptures(c10::DeviceIndex device);

// The private pool of the capture the current stream of `device` belongs
// to, if it captures.
std::optional<PoolId> CapturePoolOf(c10::DeviceIndex device);

// A draw of `generator` for a random op recorded by the capture of the
// current stream of `device`, if it captures: graph-relative, so each
// replay draws new numbers (GraphImpl::RecordDraw).
std::optional<GeneratorDraw> CaptureDraw(GeneratorImpl* generator,
                                         c10::DeviceIndex device);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_GRAPHS_CAPTURE_REGISTRY_H_
