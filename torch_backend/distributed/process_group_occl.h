// occl: the c10d backend of openreg devices (docs/DISTRIBUTED.md). Named
// as NCCL, HCCL and XCCL name theirs: the collective library of one
// accelerator. Its collectives run inside the daemon over every rank's
// device memory (device_daemon/collectives/), asynchronously on one
// communication stream per device of the group, ordered after the caller's
// current stream, as ProcessGroupNCCL orders them.
//
// The ranks of a group agree on a communicator id through the group's
// c10d store (rank 0 writes it, the others read it), as NCCL's unique id
// travels; each rank then joins it in its daemon. When the ranks reach
// several daemons (one per host), each daemon's ranks form a communicator
// of their own, and their first ranks talk through gloo.
#ifndef OPENREG_TORCH_BACKEND_DISTRIBUTED_PROCESS_GROUP_OCCL_H_
#define OPENREG_TORCH_BACKEND_DISTRIBUTED_PROCESS_GROUP_OCCL_H_

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <tuple>
#include <vector>

#include "openreg/collectives.h"
#include "protos/commands.pb.h"

namespace openreg::torch_backend {

class ProcessGroupOCCL : public c10d::Backend {
 public:
  static constexpr const char* kName = "occl";

  // Where this rank sits when the group's ranks reach several daemons
  // (hosts): its rank among its own daemon's ranks, their number, and, on
  // each daemon's first rank only, the gloo group of those first ranks.
  struct Hosts {
    int local_rank = 0;
    int local_size = 0;
    // The daemon of every rank, numbered by first rank; the gloo group's
    // rank of a daemon's first rank is its daemon's number.
    std::vector<int> host_of_rank;
    c10::intrusive_ptr<c10d::Backend> leaders;
    // A gloo group of every rank, for send/recv between daemons.
    c10::intrusive_ptr<c10d::Backend> everyone;
  };
  // Forms a new group of this backend from `store` (the Python creator,
  // torch_openreg/distributed.py): split() uses it for its subgroups.
  using GroupFormer = std::function<c10::intrusive_ptr<c10d::Backend>(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      std::chrono::milliseconds timeout)>;
  static void SetGroupFormer(GroupFormer former);

  // Joins communicator `comm_id` (shared through the group's store by the
  // Python creator, torch_openreg/distributed.py) with the ranks of this
  // daemon. `timeout` also bounds each collective's wait for the others.
  // `global_ranks` are the group's ranks in the default group (by group
  // rank), for the flight recorder.
  ProcessGroupOCCL(int rank, int size, std::chrono::milliseconds timeout,
                   const std::string& comm_id, Hosts hosts,
                   std::vector<int> global_ranks);
  ~ProcessGroupOCCL() override;

  const std::string getBackendName() const override { return kName; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsSplitting() const override { return true; }
  // The ranks of `ranks` (sorted group ranks) form a new group; nullptr on
  // the others.
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<Options>& opts) override;
  // The group's collective count (each rank's, in issue order).
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return issued_; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

  void abort() override;
  void shutdown() override;

 private:
  // What a collective enqueues on the communication stream (its current
  // stream while `enqueue` runs), given that stream's id.
  using Enqueue = std::function<void(StreamId stream)>;
  // Orders the communication stream of `device` after the current stream,
  // runs `enqueue` there, records the completion and returns the Work.
  // `inputs` and `outputs` are kept alive for the collective
  // (recordStream), and `outputs` complete the Work's future.
  c10::intrusive_ptr<c10d::Work> Run(c10d::OpType type, const char* name,
                                     c10::Device device,
                                     const std::vector<at::Tensor>& inputs,
                                     const std::vector<at::Tensor>& outputs,
                                     const Enqueue& enqueue);
  // Run() on `stream` instead of the device's communication stream.
  c10::intrusive_ptr<c10d::Work> RunOn(c10::Stream stream, c10d::OpType type,
                                       const char* name,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<at::Tensor>& outputs,
                                       const Enqueue& enqueue);
  c10::Stream CommunicationStream(c10::Device device);
  // The stream of this rank's sends to (`sending`) or receives from
  // `peer`, on `device`: a stream of its own, not the pool's, so that a
  // transfer waiting for its peer holds up nothing else, and sends and
  // receives between two ranks never wait for each other.
  c10::Stream TransferStream(c10::Device device, int peer, bool sending);
  // `peer`'s rank in this daemon's communicator; -1 when it reaches
  // another daemon.
  int LocalRankOf(int peer) const;
  // send/recv's checks and the transfer itself.
  c10::intrusive_ptr<c10d::Work> Transfer(std::vector<at::Tensor>& tensors,
                                          int peer, bool sending);
  // The group spans several daemons: collectives run hierarchically
  // (docs/DISTRIBUTED.md, "Several hosts").
  bool SpansHosts() const { return hosts_.local_size != size_; }
  // The runtime's collectives on this rank's communicator, or, across
  // daemons, their composition from the hierarchical all_reduce,
  // broadcast and all_gather below. Tensors are contiguous; `output` of
  // gather and `input` of scatter are defined at the root only.
  void ReduceOnStream(const at::Tensor& tensor, proto::ReduceOp op,
                      double scale, int root, StreamId stream);
  void ReduceScatterOnStream(const at::Tensor& input, const at::Tensor& output,
                             proto::ReduceOp op, double scale, StreamId stream);
  void AllToAllOnStream(const at::Tensor& input, const at::Tensor& output,
                        StreamId stream);
  // Unequal blocks: `send_counts[q]` elements of `input` for rank q,
  // `recv_counts[q]` of `output` from rank q, in rank order.
  void AllToAllVOnStream(const at::Tensor& input,
                         const std::vector<int64_t>& send_counts,
                         const at::Tensor& output,
                         const std::vector<int64_t>& recv_counts,
                         StreamId stream);
  void GatherOnStream(const at::Tensor& input, const at::Tensor& output,
                      int root, StreamId stream);
  void ScatterOnStream(const at::Tensor& input, const at::Tensor& output,
                       int root, StreamId stream);
  // Waits for `work` of the gloo group of the daemons' first ranks; its
  // failure (another host's rank died, or the timeout passed) becomes a
  // DistBackendError naming the collective, as this daemon's failures are.
  void WaitAcrossHosts(const c10::intrusive_ptr<c10d::Work>& work,
                       const char* collective) const;
  // all_reduce across daemons: reduce to the daemon's first rank, gloo
  // all_reduce among first ranks (host memory), broadcast back.
  void AllReduceAcrossHosts(const at::Tensor& tensor, proto::ReduceOp op,
                            double scale, StreamId stream);
  void BroadcastAcrossHosts(const at::Tensor& tensor, int root,
                            StreamId stream);
  // `input` and `output` contiguous; output holds size x input.
  void AllGatherAcrossHosts(const at::Tensor& input, const at::Tensor& output,
                            StreamId stream);

  Hosts hosts_;
  std::chrono::milliseconds timeout_;
  // Tells the daemon's flight recorder who this rank is, once, before its
  // first collective: c10d names and describes the group only after
  // creating its backend.
  void EnsureDescribed();

  CommId comm_ = 0;
  bool joined_ = false;
  uint64_t issued_ = 0;
  std::vector<int> global_ranks_;
  std::once_flag described_;
  std::vector<std::optional<c10::Stream>> streams_;
  // (device, peer, sending) -> the transfer stream.
  std::map<std::tuple<c10::DeviceIndex, int, bool>, c10::Stream>
      transfer_streams_;
};

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_DISTRIBUTED_PROCESS_GROUP_OCCL_H_
