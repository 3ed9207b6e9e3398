// Stream capture and graphs (graphs.h). Capture state lives with the
// streams (StreamContext::capture) and is checked where each call needs
// it; this file begins and ends captures and replays and frees graphs.
#include "openreg/graphs.h"

#include <atomic>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime_client/client.h"
#include "runtime_client/stream_capture.h"
#include "runtime_client/thread_state.h"

namespace openreg {

using client::MakeError;
using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::StreamCapture;
using client::StreamContext;
using client::WithSession;

namespace {

// Where each graph's latest replay on each stream was enqueued, so that
// GraphDestroy frees the graph only after them (as cudaGraphExecDestroy
// may be called with launches pending).
class PendingReplays {
 public:
  void Note(GraphId graph, uint32_t slot, uint64_t sequence) {
    absl::MutexLock lock(&mutex_);
    replays_[graph][slot] = sequence;
  }
  absl::flat_hash_map<uint32_t, uint64_t> Take(GraphId graph) {
    absl::MutexLock lock(&mutex_);
    auto found = replays_.extract(graph);
    if (found.empty()) return {};
    return std::move(found.mapped());
  }

 private:
  absl::Mutex mutex_;
  absl::flat_hash_map<GraphId, absl::flat_hash_map<uint32_t, uint64_t>> replays_
      ABSL_GUARDED_BY(mutex_);
};

PendingReplays& Pending() {
  static auto* pending = new PendingReplays;
  return *pending;
}

std::atomic<uint64_t> next_capture_id{1};

bool IsValidMode(CaptureMode mode) {
  return mode == CaptureMode::kGlobal || mode == CaptureMode::kThreadLocal ||
         mode == CaptureMode::kRelaxed;
}

}  // namespace

Error StreamBeginCapture(StreamId stream, CaptureMode mode) {
  if (!IsValidMode(mode)) {
    return ReturnStatus(MakeError(
        Error::kInvalidValue,
        absl::StrCat("openreg: StreamBeginCapture: unknown capture mode ",
                     static_cast<int>(mode))));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    StreamContext& context = **found;
    if (context.slot < static_cast<uint32_t>(session.device_count())) {
      return MakeError(
          Error::kStreamCaptureUnsupported,
          absl::StrCat("openreg: operation not permitted when stream is "
                       "capturing: graphs must be captured on a non-default "
                       "stream (stream ",
                       context.slot, " is openreg:", context.slot,
                       "'s default stream; capture on a torch.openreg.Stream "
                       "and replay anywhere)"));
    }
    absl::MutexLock lock(&context.mutex);
    if (context.capture != nullptr) {
      return MakeError(
          Error::kStreamCaptureUnsupported,
          absl::StrCat("openreg: operation not permitted when stream is "
                       "capturing: stream ",
                       context.slot, " is already capturing"));
    }
    context.capture = std::make_shared<StreamCapture>(
        next_capture_id.fetch_add(1, std::memory_order_relaxed),
        context.device.load(std::memory_order_relaxed), context.slot, mode);
    context.capture_id.store(context.capture->id(), std::memory_order_release);
    return absl::OkStatus();
  }));
}

Error StreamEndCapture(StreamId stream, uint32_t generators, GraphId* graph) {
  if (graph == nullptr) {
    return ReturnStatus(NullArgumentError("StreamEndCapture", "graph"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    StreamContext& context = **found;
    std::shared_ptr<StreamCapture> capture;
    {
      absl::MutexLock lock(&context.mutex);
      capture = context.capture;
    }
    if (capture == nullptr) {
      return MakeError(Error::kInvalidValue,
                       absl::StrCat("openreg: StreamEndCapture: stream ",
                                    context.slot, " is not capturing"));
    }
    if (capture->origin_slot() != context.slot) {
      return MakeError(
          Error::kStreamCaptureInvalidated,
          absl::StrCat("openreg: StreamEndCapture: stream ", context.slot,
                       " joined the capture that stream ",
                       capture->origin_slot(),
                       " began; end it on that stream"));
    }
    // The capture ends here whatever follows: every lane records no more.
    for (uint32_t slot : capture->Lanes()) {
      StreamContext& lane = session.StreamAt(slot);
      absl::MutexLock lock(&lane.mutex);
      if (lane.capture == capture) {
        lane.capture.reset();
        lane.capture_id.store(0, std::memory_order_release);
      }
    }
    absl::StatusOr<std::vector<std::string>> commands = capture->Finish();
    if (!commands.ok()) return commands.status();
    proto::CreateGraphRequest request;
    session.FillRef(request.mutable_session());
    request.set_device(capture->device());
    request.set_generators(generators);
    for (std::string& command : *commands) {
      request.add_commands(std::move(command));
    }
    proto::CreateGraphReply reply;
    absl::Status created =
        session.Call("CreateGraph", &proto::DeviceDaemon::Stub::CreateGraph,
                     request, &reply);
    if (!created.ok()) return created;
    *graph = reply.graph();
    return absl::OkStatus();
  }));
}

Error StreamGetCaptureStatus(StreamId stream, CaptureStatus* status) {
  if (status == nullptr) {
    return ReturnStatus(NullArgumentError("StreamGetCaptureStatus", "status"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    StreamContext& context = **found;
    absl::MutexLock lock(&context.mutex);
    if (context.capture == nullptr) {
      *status = CaptureStatus::kNone;
    } else {
      *status = context.capture->Invalidation().ok()
                    ? CaptureStatus::kActive
                    : CaptureStatus::kInvalidated;
    }
    return absl::OkStatus();
  }));
}

uint64_t StreamCaptureId(StreamId stream) {
  const std::shared_ptr<Session> session =
      client::Client::Get().CurrentSession();
  if (session == nullptr) return 0;
  const StreamId slot = ResolveStream(stream);
  if (slot >= session->limits().max_streams) return 0;
  return session->StreamAt(slot).capture_id.load(std::memory_order_acquire);
}

Error ExchangeCaptureMode(CaptureMode* mode) {
  if (mode == nullptr) {
    return ReturnStatus(NullArgumentError("ExchangeCaptureMode", "mode"));
  }
  if (!IsValidMode(*mode)) {
    return ReturnStatus(MakeError(
        Error::kInvalidValue,
        absl::StrCat("openreg: ExchangeCaptureMode: unknown capture mode ",
                     static_cast<int>(*mode))));
  }
  const CaptureMode previous = client::ThreadCaptureMode();
  client::SetThreadCaptureMode(*mode);
  *mode = previous;
  return Error::kSuccess;
}

Error GraphLaunch(GraphId graph, StreamId stream,
                  const std::vector<proto::GeneratorState>& draws) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    StreamContext& context = **found;
    if (context.capture_id.load(std::memory_order_acquire) != 0) {
      absl::MutexLock lock(&context.mutex);
      if (context.capture != nullptr) {
        return client::RefuseOnCapturingStream(*context.capture, context.slot,
                                               "a graph replay");
      }
    }
    proto::Command command;
    proto::ReplayGraph* replay = command.mutable_replay_graph();
    replay->set_graph(graph);
    for (const proto::GeneratorState& draw : draws) {
      *replay->add_generators() = draw;
    }
    absl::StatusOr<uint64_t> sequence =
        session.SubmitCommand(context, &command);
    if (!sequence.ok()) return sequence.status();
    Pending().Note(graph, context.slot, *sequence);
    return absl::OkStatus();
  }));
}

Error GraphDestroy(GraphId graph) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    for (const auto& [slot, sequence] : Pending().Take(graph)) {
      StreamContext& stream = session.StreamAt(slot);
      if (!stream.active.load(std::memory_order_acquire)) continue;
      absl::Status waited = session.WaitForCompletion(stream, sequence);
      if (client::ErrorOf(waited) == Error::kDeviceLost) return waited;
    }
    proto::DestroyGraphRequest request;
    session.FillRef(request.mutable_session());
    request.set_graph(graph);
    proto::DestroyGraphReply reply;
    return session.Call("DestroyGraph",
                        &proto::DeviceDaemon::Stub::DestroyGraph, request,
                        &reply);
  }));
}

Error GraphDescribe(GraphId graph, std::string* text) {
  if (text == nullptr) {
    return ReturnStatus(NullArgumentError("GraphDescribe", "text"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::DescribeGraphRequest request;
    session.FillRef(request.mutable_session());
    request.set_graph(graph);
    proto::DescribeGraphReply reply;
    absl::Status described =
        session.Call("DescribeGraph", &proto::DeviceDaemon::Stub::DescribeGraph,
                     request, &reply);
    if (!described.ok()) return described;
    *text = reply.text();
    return absl::OkStatus();
  }));
}

}  // namespace openreg
