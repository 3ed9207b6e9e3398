// Collectives (openreg/collectives.h): communicators through the control
// plane, collectives as Collective commands on the stream's ring.
#include "openreg/collectives.h"

#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "data_plane/device_address.h"
#include "runtime_client/client.h"
#include "runtime_client/thread_state.h"

namespace openreg {

using client::MakeError;
using client::ReturnStatus;
using client::Session;
using client::StreamContext;
using client::WithSession;

namespace {

// Each communicator's next collective number (the daemon meets the ranks'
// collectives by it), counted in issue order; sends and receives count
// apart, per peer and direction.
class CollectiveNumbers {
 public:
  // What a number counts: the communicator's collectives, or its sends to
  // (receives from) one peer.
  struct Counter {
    CommId comm = 0;
    proto::CollectiveKind kind = proto::COLLECTIVE_UNSPECIFIED;
    int peer = -1;

    template <typename H>
    friend H AbslHashValue(H hash, const Counter& counter) {
      return H::combine(std::move(hash), counter.comm, counter.kind,
                        counter.peer);
    }
    bool operator==(const Counter& other) const {
      return comm == other.comm && kind == other.kind && peer == other.peer;
    }
  };

  uint64_t Next(const Counter& counter) {
    absl::MutexLock lock(&mutex_);
    return next_[counter]++;
  }
  void Joined(CommId comm, int size) {
    absl::MutexLock lock(&mutex_);
    sizes_[comm] = size;
  }
  // The communicator's size; 0 when this process did not join it.
  int Size(CommId comm) {
    absl::MutexLock lock(&mutex_);
    auto found = sizes_.find(comm);
    return found == sizes_.end() ? 0 : found->second;
  }
  void Forget(CommId comm) {
    absl::MutexLock lock(&mutex_);
    sizes_.erase(comm);
    absl::erase_if(
        next_, [comm](const auto& entry) { return entry.first.comm == comm; });
  }

 private:
  absl::Mutex mutex_;
  absl::flat_hash_map<Counter, uint64_t> next_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<CommId, int> sizes_ ABSL_GUARDED_BY(mutex_);
};

CollectiveNumbers::Counter CounterOf(const proto::Collective& collective) {
  const bool point_to_point =
      collective.kind() == proto::SEND || collective.kind() == proto::RECV;
  if (!point_to_point) return {collective.communicator()};
  return {collective.communicator(), collective.kind(), collective.peer()};
}

CollectiveNumbers& Numbers() {
  static auto* numbers = new CollectiveNumbers();
  return *numbers;
}

absl::Status CheckPointer(const Session& session, const void* pointer,
                          const char* role, const char* operation) {
  if (pointer == nullptr) return absl::OkStatus();
  const uint64_t address = reinterpret_cast<uint64_t>(pointer);
  if (!IsDeviceAddress(address) ||
      DeviceOfAddress(address) >= session.device_count()) {
    return MakeError(Error::kInvalidValue,
                     absl::StrCat("openreg: ", operation, ": the ", role, " ",
                                  client::FormatAddress(address),
                                  " is not a device pointer of this daemon"));
  }
  return absl::OkStatus();
}

// Fills what every kind has; the caller adds the rest and submits.
Error Submit(const char* operation, const void* send, void* recv,
             proto::Command& command, StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    if (absl::Status valid =
            CheckPointer(session, send, "send buffer", operation);
        !valid.ok()) {
      return valid;
    }
    if (absl::Status valid =
            CheckPointer(session, recv, "receive buffer", operation);
        !valid.ok()) {
      return valid;
    }
    absl::StatusOr<StreamContext*> context = session.FindStream(stream);
    if (!context.ok()) return context.status();
    // Each call is numbered for its rendezvous; a replayed one would meet
    // with the wrong call (docs/GRAPHS.md, limits).
    absl::Status refused = session.RefuseIfCapturing(
        **context, absl::StrCat("a collective (", operation,
                                "; openreg graphs cannot record collectives)"));
    if (!refused.ok()) return refused;
    proto::Collective* collective = command.mutable_collective();
    collective->set_send(reinterpret_cast<uint64_t>(send));
    collective->set_recv(reinterpret_cast<uint64_t>(recv));
    collective->set_number(Numbers().Next(CounterOf(*collective)));
    return session.SubmitCommand(**context, &command).status();
  }));
}

Error Enqueue(const char* operation, proto::CollectiveKind kind,
              const void* send, void* recv, size_t count, int32_t dtype,
              proto::ReduceOp op, int root, double scale, CommId comm,
              StreamId stream) {
  proto::Command command;
  proto::Collective* collective = command.mutable_collective();
  collective->set_communicator(comm);
  collective->set_kind(kind);
  collective->set_op(op);
  collective->set_dtype(dtype);
  collective->set_count(count);
  collective->set_root(root);
  collective->set_scale(scale);
  return Submit(operation, send, recv, command, stream);
}

}  // namespace

std::string NewCommId() {
  std::random_device device;
  std::mt19937_64 bits((static_cast<uint64_t>(device()) << 32) ^ device());
  return absl::StrFormat("%016x%016x", bits(), bits());
}

Error CommInitRank(CommId* comm, const std::string& id, int size, int rank,
                   double timeout_seconds) {
  if (comm == nullptr) {
    return ReturnStatus(
        MakeError(Error::kInvalidValue, "openreg: CommInitRank: comm is null"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::CommInitRankRequest request;
    session.FillRef(request.mutable_session());
    request.set_id(id);
    request.set_size(size);
    request.set_rank(rank);
    request.set_timeout_seconds(timeout_seconds);
    proto::CommInitRankReply reply;
    absl::Status status =
        session.Call("CommInitRank", &proto::DeviceDaemon::Stub::CommInitRank,
                     request, &reply);
    if (status.ok()) {
      *comm = reply.communicator();
      Numbers().Joined(*comm, size);
    }
    return status;
  }));
}

Error CommDescribe(CommId comm, const proto::FlightRecorderIdentity& identity) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::CommDescribeRequest request;
    session.FillRef(request.mutable_session());
    request.set_communicator(comm);
    *request.mutable_identity() = identity;
    proto::CommDescribeReply reply;
    return session.Call("CommDescribe",
                        &proto::DeviceDaemon::Stub::CommDescribe, request,
                        &reply);
  }));
}

Error DumpFlightRecorder(std::map<int, std::string>* traces, int pid) {
  if (traces == nullptr) {
    return ReturnStatus(MakeError(
        Error::kInvalidValue, "openreg: DumpFlightRecorder: traces is null"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::DumpFlightRecorderRequest request;
    if (pid == 0) {
      session.FillRef(request.mutable_session());
    } else {
      request.set_pid(pid);
    }
    proto::DumpFlightRecorderReply reply;
    absl::Status status = session.Call(
        "DumpFlightRecorder", &proto::DeviceDaemon::Stub::DumpFlightRecorder,
        request, &reply);
    if (!status.ok()) return status;
    traces->clear();
    for (proto::RankTrace& trace : *reply.mutable_traces()) {
      (*traces)[trace.global_rank()] = std::move(*trace.mutable_trace());
    }
    return absl::OkStatus();
  }));
}

Error CommDestroy(CommId comm, bool abort) {
  Numbers().Forget(comm);
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::CommDestroyRequest request;
    session.FillRef(request.mutable_session());
    request.set_communicator(comm);
    request.set_abort(abort);
    proto::CommDestroyReply reply;
    return session.Call("CommDestroy", &proto::DeviceDaemon::Stub::CommDestroy,
                        request, &reply);
  }));
}

Error AllReduce(const void* send, void* recv, size_t count, int32_t dtype,
                proto::ReduceOp op, CommId comm, StreamId stream,
                double premul_scale) {
  return Enqueue("AllReduce", proto::ALL_REDUCE, send, recv, count, dtype, op,
                 0, premul_scale, comm, stream);
}

Error Broadcast(void* buffer, size_t count, int32_t dtype, int root,
                CommId comm, StreamId stream) {
  return Enqueue("Broadcast", proto::BROADCAST, nullptr, buffer, count, dtype,
                 proto::REDUCE_OP_UNSPECIFIED, root, 1.0, comm, stream);
}

Error Reduce(const void* send, void* recv, size_t count, int32_t dtype,
             proto::ReduceOp op, int root, CommId comm, StreamId stream,
             double premul_scale) {
  return Enqueue("Reduce", proto::REDUCE, send, recv, count, dtype, op, root,
                 premul_scale, comm, stream);
}

Error AllGather(const void* send, void* recv, size_t count, int32_t dtype,
                CommId comm, StreamId stream) {
  return Enqueue("AllGather", proto::ALL_GATHER, send, recv, count, dtype,
                 proto::REDUCE_OP_UNSPECIFIED, 0, 1.0, comm, stream);
}

Error ReduceScatter(const void* send, void* recv, size_t count, int32_t dtype,
                    proto::ReduceOp op, CommId comm, StreamId stream,
                    double premul_scale) {
  return Enqueue("ReduceScatter", proto::REDUCE_SCATTER, send, recv, count,
                 dtype, op, 0, premul_scale, comm, stream);
}

Error AllToAll(const void* send, void* recv, size_t count, int32_t dtype,
               CommId comm, StreamId stream) {
  return Enqueue("AllToAll", proto::ALL_TO_ALL, send, recv, count, dtype,
                 proto::REDUCE_OP_UNSPECIFIED, 0, 1.0, comm, stream);
}

Error Gather(const void* send, void* recv, size_t count, int32_t dtype,
             int root, CommId comm, StreamId stream) {
  return Enqueue("Gather", proto::GATHER, send, recv, count, dtype,
                 proto::REDUCE_OP_UNSPECIFIED, root, 1.0, comm, stream);
}

Error Scatter(const void* send, void* recv, size_t count, int32_t dtype,
              int root, CommId comm, StreamId stream) {
  return Enqueue("Scatter", proto::SCATTER, send, recv, count, dtype,
                 proto::REDUCE_OP_UNSPECIFIED, root, 1.0, comm, stream);
}

Error Barrier(CommId comm, StreamId stream) {
  return Enqueue("Barrier", proto::BARRIER, nullptr, nullptr, 0, 0,
                 proto::REDUCE_OP_UNSPECIFIED, 0, 1.0, comm, stream);
}

Error AllToAllV(const void* send, const size_t* send_counts, void* recv,
                const size_t* recv_counts, int32_t dtype, CommId comm,
                StreamId stream) {
  proto::Command command;
  proto::Collective* collective = command.mutable_collective();
  collective->set_communicator(comm);
  collective->set_kind(proto::ALL_TO_ALLV);
  collective->set_dtype(dtype);
  const int size = Numbers().Size(comm);
  if (size <= 0 || send_counts == nullptr || recv_counts == nullptr) {
    return ReturnStatus(
        MakeError(Error::kInvalidValue,
                  size <= 0 ? "openreg: AllToAllV: unknown communicator"
                            : "openreg: AllToAllV: the count arrays are null"));
  }
  for (int rank = 0; rank < size; ++rank) {
    collective->add_send_counts(send_counts[rank]);
    collective->add_recv_counts(recv_counts[rank]);
  }
  return Submit("AllToAllV", send, recv, command, stream);
}

Error Send(const void* buffer, size_t count, int32_t dtype, int peer,
           CommId comm, StreamId stream) {
  proto::Command command;
  proto::Collective* collective = command.mutable_collective();
  collective->set_communicator(comm);
  collective->set_kind(proto::SEND);
  collective->set_dtype(dtype);
  collective->set_count(count);
  collective->set_peer(peer);
  return Submit("Send", buffer, nullptr, command, stream);
}

Error Recv(void* buffer, size_t count, int32_t dtype, int peer, CommId comm,
           StreamId stream) {
  proto::Command command;
  proto::Collective* collective = command.mutable_collective();
  collective->set_communicator(comm);
  collective->set_kind(proto::RECV);
  collective->set_dtype(dtype);
  collective->set_count(count);
  collective->set_peer(peer);
  return Submit("Recv", nullptr, buffer, command, stream);
}

}  // namespace openreg
