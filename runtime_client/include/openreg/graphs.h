// Stream capture and graphs, shaped like CUDA's (cudaStreamBeginCapture,
// cudaStreamEndCapture, cudaGraphLaunch; docs/GRAPHS.md).
//
// While a stream captures, the commands it would run are recorded in the
// client instead of being sent; EndCapture hands them to the daemon, which
// checks them once and keeps them as a graph of this session. A replay is
// one command on a stream's ring that runs them all, in order.
//
// What capture permits, as CUDA does:
// - On a capturing stream, anything that needs the work done now fails
//   with kStreamCaptureUnsupported and invalidates the capture: a
//   synchronous launch (an op whose result the host reads), a copy through
//   pageable host memory, synchronizing or querying the stream or an event
//   recorded in the capture, a collective, a graph replay.
// - Potentially unsafe calls (synchronizing the device, another stream or
//   event, allocating device memory, pinned host memory) fail with
//   kStreamCaptureUnsupported while a capture of mode kGlobal is active in
//   any thread, or one of mode kThreadLocal in this thread, unless this
//   thread's mode is kRelaxed (ExchangeCaptureMode); a kRelaxed capture
//   forbids none of them.
// - Another stream joins the capture by waiting for an event recorded in
//   it; every joined stream's work must be waited for by the capturing
//   stream before EndCapture (else kStreamCaptureInvalidated), and a
//   capturing stream may not wait for unfinished work outside its capture.
#ifndef OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_GRAPHS_H_
#define OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_GRAPHS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "openreg/runtime.h"
#include "protos/commands.pb.h"

namespace openreg {

// Values as cudaStreamCaptureMode's.
enum class CaptureMode : int {
  kGlobal = 0,
  kThreadLocal = 1,
  kRelaxed = 2,
};

enum class CaptureStatus : int {
  kNone = 0,
  kActive = 1,
  kInvalidated = 2,
};

using GraphId = uint64_t;

// Starts capturing `stream` (not a device's default stream).
Error StreamBeginCapture(StreamId stream, CaptureMode mode);
// Ends the capture `stream` began: on success `*graph` is a new graph of
// the session on the stream's device, whose replays pass `generators`
// draws (GraphLaunch). The capture ends whatever the result.
Error StreamEndCapture(StreamId stream, uint32_t generators, GraphId* graph);
// Whether `stream` captures (began it or joined it).
Error StreamGetCaptureStatus(StreamId stream, CaptureStatus* status);
// The id of the capture `stream` belongs to, 0 when none; never fails.
uint64_t StreamCaptureId(StreamId stream);
// Sets this thread's capture mode, returning the previous one in `*mode`
// (cudaThreadExchangeStreamCaptureMode).
Error ExchangeCaptureMode(CaptureMode* mode);

// Enqueues a replay of `graph` on `stream`; `draws` are this replay's
// (seed, offset) of each generator the graph registered, in order.
Error GraphLaunch(GraphId graph, StreamId stream,
                  const std::vector<proto::GeneratorState>& draws);
// Frees `graph` once the replays already enqueued have run.
Error GraphDestroy(GraphId graph);
// The recorded commands, one line each (the daemon's text).
Error GraphDescribe(GraphId graph, std::string* text);

}  // namespace openreg

#endif  // OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_GRAPHS_H_
