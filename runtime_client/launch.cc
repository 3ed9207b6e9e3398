// Op launch and introspection (launch.h). LaunchOp is the per-op hot path:
// it serializes into a thread-local buffer and writes the stream's ring,
// with no RPC and no allocation beyond what the caller's proto holds.
#include "openreg/launch.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "data_plane/warning_mailbox.h"
#include "runtime_client/client.h"
#include "runtime_client/command_encoding.h"
#include "runtime_client/command_phase.h"
#include "runtime_client/thread_state.h"

namespace openreg {

// The runtime API is openreg::; its machinery is openreg::client::.
using client::Client;
using client::EncodeLaunchCommand;
using client::EncodeSerializedLaunchCommand;
using client::MakeError;
using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::StreamContext;
using client::WithSession;

namespace {

// Results of a synchronous op are fresh allocations owned by this session:
// their addresses are live again, whatever this process freed before.
void ForgetFreedResults(Session& session, const proto::Argument& argument) {
  if (argument.has_tensor()) {
    session.freed_addresses().Erase(argument.tensor().address());
  } else if (argument.has_tensor_list()) {
    for (const proto::Argument& element : argument.tensor_list().values()) {
      ForgetFreedResults(session, element);
    }
  }
}

absl::Status ReadReply(Session& session, StreamContext& stream,
                       uint64_t sequence, proto::OpReply* reply)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream.mutex) {
  // The daemon wrote the reply before completing the command, and the
  // completion was acquired by the wait.
  const uint64_t reply_sequence = stream.shared->reply_sequence;
  const uint64_t reply_size = stream.shared->reply_size;
  if (reply_sequence != sequence) {
    return MakeError(
        Error::kInternal,
        absl::StrCat("openreg: no reply for synchronous op ", sequence,
                     " on stream ", stream.slot, " (the reply area holds op ",
                     reply_sequence, ")"));
  }
  if (reply_size > session.limits().reply_bytes) {
    return MakeError(Error::kInternal,
                     absl::StrCat("openreg: the daemon's reply of ", reply_size,
                                  " bytes exceeds the reply "
                                  "area of ",
                                  session.limits().reply_bytes, " bytes"));
  }
  if (!reply->ParseFromArray(stream.reply_area, static_cast<int>(reply_size))) {
    return MakeError(Error::kInternal,
                     "openreg: the daemon's reply to a synchronous op is "
                     "malformed");
  }
  for (const proto::Argument& result : reply->results()) {
    ForgetFreedResults(session, result);
  }
  return absl::OkStatus();
}

}  // namespace

Error LaunchOp(const proto::LaunchOp& op, StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    if (op.synchronous()) {
      return MakeError(Error::kInvalidValue,
                       absl::StrCat("openreg: LaunchOp(", op.name(),
                                    "): synchronous ops go through "
                                    "LaunchOpSync"));
    }
    absl::StatusOr<StreamContext*> context = session.FindStream(stream);
    if (!context.ok()) return context.status();
    return session
        .Submit(**context,
                [&op](uint64_t sequence) {
                  return EncodeLaunchCommand(sequence, op,
                                             /*force_synchronous=*/false);
                })
        .status();
  }));
}

Error LaunchSerializedOp(std::string_view op, StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> context = session.FindStream(stream);
    if (!context.ok()) return context.status();
    return session
        .Submit(**context,
                [op](uint64_t sequence) {
                  return EncodeSerializedLaunchCommand(
                      sequence, absl::string_view(op.data(), op.size()));
                })
        .status();
  }));
}

Error LaunchOpSync(const proto::LaunchOp& op, proto::OpReply* reply,
                   StreamId stream) {
  if (reply == nullptr) {
    return ReturnStatus(NullArgumentError("LaunchOpSync", "reply"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> found = session.FindStream(stream);
    if (!found.ok()) return found.status();
    StreamContext& context = **found;
    absl::Status refused = session.RefuseIfCapturing(
        context, absl::StrCat("an op whose results the host needs now (",
                              op.name(), ")"));
    if (!refused.ok()) return refused;
    // Held until the reply has been read: the stream has one reply area,
    // and another thread's synchronous op must not overwrite it first.
    absl::MutexLock lock(&context.mutex);
    absl::StatusOr<uint64_t> sequence =
        session.SubmitLocked(context, [&op](uint64_t sequence) {
          return EncodeLaunchCommand(sequence, op, /*force_synchronous=*/true);
        });
    if (!sequence.ok()) return sequence.status();
    absl::Status waited = session.WaitForCompletion(context, *sequence);
    if (!waited.ok()) return waited;
    absl::Status failed = session.TakeStreamError(context);
    if (!failed.ok()) return failed;
    reply->Clear();
    return ReadReply(session, context, *sequence, reply);
  }));
}

void TakeKernelWarnings(std::vector<proto::KernelWarning>* warnings,
                        uint64_t* dropped) {
  *dropped = 0;
  const std::shared_ptr<Session> session = Client::Get().CurrentSession();
  if (session == nullptr) return;
  session->ForEachSubmittedSlot([&](StreamContext& stream) {
    WarningMailbox& mailbox = stream.shared->warnings;
    // One load per idle stream: most mailboxes are empty.
    if (mailbox.state.load(std::memory_order_relaxed) !=
            WarningMailbox::kReady &&
        mailbox.dropped.load(std::memory_order_relaxed) == 0) {
      return;
    }
    uint32_t lost = 0;
    for (const std::string& record : TakeFromMailbox(mailbox, &lost)) {
      if (!warnings->emplace_back().ParseFromString(record)) {
        warnings->pop_back();
        ++lost;
      }
    }
    *dropped += lost;
  });
}

uint64_t LastSubmitted(StreamId stream) {
  const std::shared_ptr<Session> session = Client::Get().CurrentSession();
  if (session == nullptr) return 0;  // nothing was ever submitted
  const StreamId slot = ResolveStream(stream);
  if (slot >= session->limits().max_streams) return 0;
  return session->StreamAt(slot).last_submitted.load(std::memory_order_acquire);
}

Error GetStats(proto::GetStatsReply* stats) {
  if (stats == nullptr) {
    return ReturnStatus(NullArgumentError("GetStats", "stats"));
  }
  return ReturnStatus(WithSession([stats](Session& session) {
    stats->Clear();
    return session.Call("GetStats", &proto::DeviceDaemon::Stub::GetStats,
                        proto::GetStatsRequest(), stats);
  }));
}

Error CostProfile(proto::CostProfileRequest::Action action,
                  proto::CostProfileReply* reply) {
  if (reply == nullptr) {
    return ReturnStatus(NullArgumentError("CostProfile", "reply"));
  }
  return ReturnStatus(WithSession([action, reply](Session& session) {
    reply->Clear();
    proto::CostProfileRequest request;
    request.set_action(action);
    return session.Call("CostProfile", &proto::DeviceDaemon::Stub::CostProfile,
                        request, reply);
  }));
}

Error TraceActivity(bool on, proto::TraceActivityReply* reply) {
  if (reply == nullptr) {
    return ReturnStatus(NullArgumentError("TraceActivity", "reply"));
  }
  return ReturnStatus(WithSession([on, reply](Session& session) {
    reply->Clear();
    proto::TraceActivityRequest request;
    session.FillRef(request.mutable_session());
    request.set_on(on);
    return session.Call("TraceActivity",
                        &proto::DeviceDaemon::Stub::TraceActivity, request,
                        reply);
  }));
}

void SetCommandCorrelationId(uint64_t id) {
  client::SetThreadCorrelationId(id);
}

}  // namespace openreg
