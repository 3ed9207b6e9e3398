// Collectives between processes on openreg devices, run inside the daemon
// over every rank's device memory (docs/DISTRIBUTED.md), with NCCL's
// shape: ranks join a communicator (CommInitRank, once per group), then
// enqueue collectives on streams; each runs when every rank's stream
// reached it, asynchronously for the host. Kept apart from runtime.h
// because it exposes the enums of protos/commands.proto.
//
// Every rank must issue the same collectives in the same order (as with
// NCCL); ranks that disagree, or a rank whose process ends or that does
// not arrive within the communicator's timeout, make the collective fail on
// every rank with kCollectiveFailure naming the rank (a stream error,
// reported at the next synchronization, like a kernel's). The session's
// error is not sticky; the communicator is unusable afterwards.
#ifndef OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_COLLECTIVES_H_
#define OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "openreg/runtime.h"
#include "protos/commands.pb.h"
#include "protos/control.pb.h"

namespace openreg {

// This session's handle of a communicator.
using CommId = uint64_t;

// Joins communicator `id` (1 to 256 bytes, the same for every rank: share
// it through the job's store, as ncclUniqueId) of `size` ranks as `rank`.
// `timeout_seconds` bounds each collective's wait for the other ranks.
Error CommInitRank(CommId* comm, const std::string& id, int size, int rank,
                   double timeout_seconds);
// Leaves the communicator (like ncclCommDestroy); with `abort` (like
// ncclCommAbort) the other ranks' pending and later collectives fail.
Error CommDestroy(CommId comm, bool abort = false);
// A random id for a new communicator (hex of 128 random bits).
std::string NewCommId();
// Tells the daemon's flight recorder who this rank is (c10d's group name
// and description, global ranks) and how much to keep; once, before the
// rank's first collective on `comm`.
Error CommDescribe(CommId comm, const proto::FlightRecorderIdentity& identity);
// The flight recorder's traces (PyTorch's pickle format) of every rank of
// this process's job on this daemon, by global rank; with `pid`, of the job
// of that process instead.
Error DumpFlightRecorder(std::map<int, std::string>* traces, int pid = 0);

// The collectives; `dtype` is a c10::ScalarType code, counts are elements,
// and the buffers hold what protos/commands.proto's Collective says for
// each kind. Pointers a rank does not use (a non-root's reduce output) may
// be null.
Error AllReduce(const void* send, void* recv, size_t count, int32_t dtype,
                proto::ReduceOp op, CommId comm, StreamId stream,
                double premul_scale = 1.0);
Error Broadcast(void* buffer, size_t count, int32_t dtype, int root,
                CommId comm, StreamId stream);
Error Reduce(const void* send, void* recv, size_t count, int32_t dtype,
             proto::ReduceOp op, int root, CommId comm, StreamId stream,
             double premul_scale = 1.0);
Error AllGather(const void* send, void* recv, size_t count, int32_t dtype,
                CommId comm, StreamId stream);
Error ReduceScatter(const void* send, void* recv, size_t count, int32_t dtype,
                    proto::ReduceOp op, CommId comm, StreamId stream,
                    double premul_scale = 1.0);
Error AllToAll(const void* send, void* recv, size_t count, int32_t dtype,
               CommId comm, StreamId stream);
Error Gather(const void* send, void* recv, size_t count, int32_t dtype,
             int root, CommId comm, StreamId stream);
Error Scatter(const void* send, void* recv, size_t count, int32_t dtype,
              int root, CommId comm, StreamId stream);
Error Barrier(CommId comm, StreamId stream);
// Unequal all_to_all: `send` holds send_counts[q] elements for each rank q
// in rank order, `recv` gets recv_counts[q] from each rank q; both arrays
// have one count per rank, and rank r's send_counts[q] must equal rank q's
// recv_counts[r] (checked before anything moves).
Error AllToAllV(const void* send, const size_t* send_counts, void* recv,
                const size_t* recv_counts, int32_t dtype, CommId comm,
                StreamId stream);

// Point-to-point, as ncclSend/ncclRecv: the k-th Send of rank s to rank d
// meets the k-th Recv of rank d from rank s (counts and dtypes must agree),
// and each waits on its stream for the other. Sends and receives of one
// rank do not wait for each other unless they share a stream: put a
// rank's sends and receives on separate streams when peers exchange data
// in both directions.
Error Send(const void* buffer, size_t count, int32_t dtype, int peer,
           CommId comm, StreamId stream);
Error Recv(void* buffer, size_t count, int32_t dtype, int peer, CommId comm,
           StreamId stream);

}  // namespace openreg

#endif  // OPENREG_RUNTIME_CLIENT_INCLUDE_OPENREG_COLLECTIVES_H_
