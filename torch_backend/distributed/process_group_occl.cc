#include "torch_backend/distributed/process_group_occl.h"

#include <ATen/ATen.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "data_plane/flight_recorder_settings.h"
#include "torch_backend/command_phase.h"
#include "torch_backend/device_guard.h"
#include "torch_backend/distributed/host_transfer_work.h"
#include "torch_backend/distributed/occl_work.h"
#include "torch_backend/ignored_error.h"
#include "torch_backend/runtime_error.h"

namespace openreg::torch_backend {
namespace {

constexpr c10::DeviceType kOpenReg = c10::DeviceType::PrivateUse1;

void CheckOnDevice(const at::Tensor& tensor, const char* what) {
  TORCH_CHECK(tensor.device().type() == kOpenReg, "occl: ", what,
              " must be on an openreg device, not ", tensor.device(),
              " (for CPU tensors use gloo: init_process_group(backend="
              "\"cpu:gloo,openreg:occl\"))");
}

c10::Device DeviceOf(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(!tensors.empty(), "occl: ", what, " is empty");
  for (const at::Tensor& tensor : tensors) CheckOnDevice(tensor, what);
  for (const at::Tensor& tensor : tensors) {
    TORCH_CHECK(tensor.device() == tensors[0].device(), "occl: the ", what,
                " are on ", tensors[0].device(), " and ", tensor.device(),
                ": one device per rank");
  }
  return tensors[0].device();
}

int32_t DtypeCode(const at::Tensor& tensor) {
  return static_cast<int32_t>(tensor.scalar_type());
}

void* Address(const at::Tensor& tensor) {
  return tensor.numel() == 0 ? nullptr : tensor.data_ptr();
}

// c10d's reduction as the daemon's, with PREMUL_SUM's factor.
std::pair<proto::ReduceOp, double> ToReduceOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return {proto::SUM, 1.0};
    case c10d::ReduceOp::AVG:
      return {proto::AVG, 1.0};
    case c10d::ReduceOp::PRODUCT:
      return {proto::PRODUCT, 1.0};
    case c10d::ReduceOp::MIN:
      return {proto::MIN, 1.0};
    case c10d::ReduceOp::MAX:
      return {proto::MAX, 1.0};
    case c10d::ReduceOp::PREMUL_SUM: {
      const auto* supplement =
          dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(supplement != nullptr, "occl: PREMUL_SUM without its factor");
      const double factor = supplement->tensor_factor.defined()
                                ? supplement->tensor_factor.item<double>()
                                : supplement->double_factor;
      return {proto::PREMUL_SUM, factor};
    }
    default:
      TORCH_CHECK(false, "occl: reduction ", static_cast<int>(op.op_),
                  " (bitwise and, or, xor) is not supported, as in NCCL; "
                  "use SUM, AVG, PRODUCT, MIN, MAX or PREMUL_SUM");
  }
}

// Reductions the daemon refuses (collective_engine.cc validates every
// rank's command), refused here at the call, before anything is enqueued:
// a rank that alone sent a bad collective would fail the whole group.
void CheckReducible(const std::vector<at::Tensor>& tensors, proto::ReduceOp op,
                    const char* name) {
  for (const at::Tensor& tensor : tensors) {
    const c10::ScalarType dtype = tensor.scalar_type();
    TORCH_CHECK(!c10::isFloat8Type(dtype) && !c10::isQIntType(dtype) &&
                    !c10::isBitsType(dtype),
                "occl: ", name, " of ", dtype,
                " is not supported: float8, quantized and bits dtypes are "
                "not reduced (move them with all_gather, or reduce in a wider "
                "dtype)");
    const bool floating =
        c10::isFloatingType(dtype) || c10::isComplexType(dtype);
    TORCH_CHECK(floating || (op != proto::AVG && op != proto::PREMUL_SUM),
                "occl: ", name,
                ": avg and premul_sum need a floating-point "
                "dtype, not ",
                dtype);
    TORCH_CHECK(
        !c10::isComplexType(dtype) || (op != proto::MIN && op != proto::MAX),
        "occl: ", name, ": min and max are not defined for ", dtype);
  }
}

// Runs `body` on a contiguous version of `tensor` (itself when already
// contiguous), then copies back what `body` wrote: on the current stream.
void WithContiguous(const at::Tensor& tensor, bool copy_back,
                    const std::function<void(const at::Tensor&)>& body) {
  if (tensor.is_contiguous()) {
    body(tensor);
    return;
  }
  const at::Tensor staged = tensor.contiguous();
  body(staged);
  if (copy_back) tensor.copy_(staged);
}

// The daemon's collective calls report failures as Error codes.
void Check(Error error, const char* call) { CheckRuntime(error, call); }

// The c10d reduction that finishes `op` among the daemons' first ranks,
// whose inputs are their daemons' partial results (AVG: a sum, divided
// afterwards; PREMUL_SUM: already scaled).
c10d::ReduceOp AcrossHosts(proto::ReduceOp op) {
  switch (op) {
    case proto::PRODUCT:
      return c10d::ReduceOp::PRODUCT;
    case proto::MIN:
      return c10d::ReduceOp::MIN;
    case proto::MAX:
      return c10d::ReduceOp::MAX;
    default:
      return c10d::ReduceOp::SUM;
  }
}

}  // namespace

ProcessGroupOCCL::ProcessGroupOCCL(int rank, int size,
                                   std::chrono::milliseconds timeout,
                                   const std::string& comm_id, Hosts hosts,
                                   std::vector<int> global_ranks)
    : c10d::Backend(rank, size),
      hosts_(std::move(hosts)),
      timeout_(timeout),
      global_ranks_(std::move(global_ranks)) {
  TORCH_CHECK(
      global_ranks_.empty() || static_cast<int>(global_ranks_.size()) == size,
      "occl: ", global_ranks_.size(), " global ranks for a group of ", size);
  if (global_ranks_.empty()) {
    for (int r = 0; r < size; ++r) global_ranks_.push_back(r);
  }
  if (hosts_.local_size == 0) hosts_.local_size = size;
  TORCH_CHECK(hosts_.local_rank >= 0 && hosts_.local_rank < hosts_.local_size &&
                  hosts_.local_size <= size,
              "occl: local rank ", hosts_.local_rank, " of ", hosts_.local_size,
              " in a group of ", size);
  TORCH_CHECK(
      !SpansHosts() || static_cast<int>(hosts_.host_of_rank.size()) == size,
      "occl: a group across daemons needs every rank's daemon");
  TORCH_CHECK(!SpansHosts() || (hosts_.local_rank == 0) == bool(hosts_.leaders),
              "occl: a daemon's first rank, and only it, talks to the other "
              "daemons");
  const double seconds =
      std::chrono::duration_cast<std::chrono::duration<double>>(timeout)
          .count();
  OPENREG_CHECK(CommInitRank(&comm_, comm_id, hosts_.local_size,
                             hosts_.local_rank, seconds));
  joined_ = true;
}

void ProcessGroupOCCL::ReduceOnStream(const at::Tensor& tensor,
                                      proto::ReduceOp op, double scale,
                                      int root, StreamId stream) {
  if (!SpansHosts()) {
    Check(Reduce(Address(tensor), Address(tensor), tensor.numel(),
                 DtypeCode(tensor), op, root, comm_, stream, scale),
          "Reduce");
    return;
  }
  // An all_reduce whose result only the root keeps.
  const at::Tensor reduced = tensor.clone();
  AllReduceAcrossHosts(reduced, op, scale, stream);
  if (rank_ == root) tensor.copy_(reduced);
}

void ProcessGroupOCCL::ReduceScatterOnStream(const at::Tensor& input,
                                             const at::Tensor& output,
                                             proto::ReduceOp op, double scale,
                                             StreamId stream) {
  if (!SpansHosts()) {
    Check(ReduceScatter(Address(input), Address(output), output.numel(),
                        DtypeCode(output), op, comm_, stream, scale),
          "ReduceScatter");
    return;
  }
  // An all_reduce of the whole input, of which each rank keeps its block.
  const at::Tensor reduced = input.reshape({-1}).clone();
  AllReduceAcrossHosts(reduced, op, scale, stream);
  output.view({-1}).copy_(
      reduced.narrow(0, rank_ * output.numel(), output.numel()));
}

void ProcessGroupOCCL::AllToAllOnStream(const at::Tensor& input,
                                        const at::Tensor& output,
                                        StreamId stream) {
  const int64_t block = output.numel() / size_;
  if (!SpansHosts()) {
    Check(AllToAll(Address(input), Address(output), block, DtypeCode(output),
                   comm_, stream),
          "AllToAll");
    return;
  }
  // Every rank's whole input everywhere; each rank takes its blocks.
  const at::Tensor gathered =
      at::empty({size_ * input.numel()}, input.options());
  AllGatherAcrossHosts(input, gathered, stream);
  const at::Tensor flat = output.view({-1});
  for (int from = 0; from < size_; ++from) {
    flat.narrow(0, from * block, block)
        .copy_(gathered.narrow(0, from * input.numel() + rank_ * block, block));
  }
}

void ProcessGroupOCCL::GatherOnStream(const at::Tensor& input,
                                      const at::Tensor& output, int root,
                                      StreamId stream) {
  if (!SpansHosts()) {
    Check(Gather(Address(input), output.defined() ? Address(output) : nullptr,
                 input.numel(), DtypeCode(input), root, comm_, stream),
          "Gather");
    return;
  }
  const at::Tensor gathered =
      at::empty({size_ * input.numel()}, input.options());
  AllGatherAcrossHosts(input, gathered, stream);
  if (rank_ == root) output.view({-1}).copy_(gathered);
}

void ProcessGroupOCCL::ScatterOnStream(const at::Tensor& input,
                                       const at::Tensor& output, int root,
                                       StreamId stream) {
  if (!SpansHosts()) {
    Check(Scatter(input.defined() ? Address(input) : nullptr, Address(output),
                  output.numel(), DtypeCode(output), root, comm_, stream),
          "Scatter");
    return;
  }
  // The root's whole input everywhere; each rank takes its block.
  const at::Tensor everything =
      rank_ == root ? input.reshape({-1}).clone()
                    : at::empty({size_ * output.numel()}, output.options());
  BroadcastAcrossHosts(everything, root, stream);
  output.view({-1}).copy_(
      everything.narrow(0, rank_ * output.numel(), output.numel()));
}

void ProcessGroupOCCL::WaitAcrossHosts(
    const c10::intrusive_ptr<c10d::Work>& work, const char* collective) const {
  try {
    work->wait();
  } catch (const std::exception& error) {
    C10_THROW_ERROR(
        DistBackendError,
        std::string("occl ") + collective + " (rank " + std::to_string(rank_) +
            " of " + std::to_string(size_) +
            ") across daemons: the exchange between the daemons' first "
            "ranks (gloo) failed; a rank on another host ended or missed "
            "the group's timeout: " +
            error.what());
  }
}

void ProcessGroupOCCL::AllReduceAcrossHosts(const at::Tensor& tensor,
                                            proto::ReduceOp op, double scale,
                                            StreamId stream) {
  TORCH_CHECK(op != proto::AVG || at::isFloatingType(tensor.scalar_type()) ||
                  at::isComplexType(tensor.scalar_type()),
              "occl: avg needs a floating-point dtype, not ",
              tensor.scalar_type());
  void* address = Address(tensor);
  const int32_t dtype = DtypeCode(tensor);
  const proto::ReduceOp local = op == proto::AVG ? proto::SUM : op;
  Check(Reduce(address, address, tensor.numel(), dtype, local, 0, comm_, stream,
               scale),
        "Reduce");
  if (hosts_.local_rank == 0) {
    // This daemon's partial result, through host memory (gloo), then back.
    OPENREG_CHECK(StreamSynchronize(stream));
    at::Tensor host = tensor.to(at::kCPU);
    std::vector<at::Tensor> parts{host};
    c10d::AllreduceOptions options;
    options.reduceOp = AcrossHosts(op);
    WaitAcrossHosts(hosts_.leaders->allreduce(parts, options), "all_reduce");
    if (op == proto::AVG) host.div_(size_);
    tensor.copy_(host);
  }
  Check(Broadcast(address, tensor.numel(), dtype, 0, comm_, stream),
        "Broadcast");
}

void ProcessGroupOCCL::AllGatherAcrossHosts(const at::Tensor& input,
                                            const at::Tensor& output,
                                            StreamId stream) {
  // One broadcast per rank into its slot: exact for every dtype, n
  // collectives (DDP and FSDP gather at setup, not per step).
  const int64_t block = input.numel();
  const at::Tensor flat = output.view({-1});
  flat.narrow(0, rank_ * block, block).copy_(input.view({-1}));
  for (int root = 0; root < size_; ++root) {
    BroadcastAcrossHosts(flat.narrow(0, root * block, block), root, stream);
  }
}

void ProcessGroupOCCL::BroadcastAcrossHosts(const at::Tensor& tensor, int root,
                                            StreamId stream) {
  void* address = Address(tensor);
  const int32_t dtype = DtypeCode(tensor);
  const int root_host = hosts_.host_of_rank[root];
  const int my_host = hosts_.host_of_rank[rank_];
  int root_local = 0;
  for (int r = 0; r < root; ++r) {
    root_local += hosts_.host_of_rank[r] == root_host ? 1 : 0;
  }
  // The root's daemon first: its first rank then holds the data.
  if (my_host == root_host) {
    Check(Broadcast(address, tensor.numel(), dtype, root_local, comm_, stream),
          "Broadcast");
  }
  if (hosts_.local_rank == 0) {
    OPENREG_CHECK(StreamSynchronize(stream));
    at::Tensor host = tensor.to(at::kCPU);
    std::vector<at::Tensor> parts{host};
    c10d::BroadcastOptions options;
    options.rootRank = root_host;
    WaitAcrossHosts(hosts_.leaders->broadcast(parts, options), "broadcast");
    if (my_host != root_host) tensor.copy_(host);
  }
  if (my_host != root_host) {
    Check(Broadcast(address, tensor.numel(), dtype, 0, comm_, stream),
          "Broadcast");
  }
}

namespace {

ProcessGroupOCCL::GroupFormer& Former() {
  static auto* former = new ProcessGroupOCCL::GroupFormer();
  return *former;
}

}  // namespace

void ProcessGroupOCCL::SetGroupFormer(GroupFormer former) {
  Former() = std::move(former);
}

c10::intrusive_ptr<c10d::Backend::Options>
ProcessGroupOCCL::getBackendOptions() {
  return c10::make_intrusive<Options>(kName, timeout_);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupOCCL::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  const auto found = std::find(ranks.begin(), ranks.end(), rank_);
  if (found == ranks.end()) return nullptr;
  TORCH_CHECK(Former() != nullptr,
              "occl: split_group before torch_openreg registered occl");
  return Former()(store, static_cast<int>(found - ranks.begin()),
                  static_cast<int>(ranks.size()),
                  opts != nullptr ? opts->timeout : timeout_);
}

ProcessGroupOCCL::~ProcessGroupOCCL() { shutdown(); }

void ProcessGroupOCCL::abort() {
  if (!joined_) return;
  joined_ = false;
  CommDestroy(comm_, /*abort=*/true);
}

void ProcessGroupOCCL::shutdown() {
  if (!joined_) return;
  joined_ = false;
  // As ncclCommDestroy: what this rank issued completes first (the other
  // ranks may be waiting for it); a failure was or will be reported by the
  // collective's own Work.
  for (const std::optional<c10::Stream>& stream : streams_) {
    if (stream.has_value()) {
      IgnoreError(StreamSynchronize(static_cast<StreamId>(stream->id())),
                  "a failed collective reports itself through its Work");
    }
  }
  for (const auto& [key, stream] : transfer_streams_) {
    IgnoreError(StreamSynchronize(static_cast<StreamId>(stream.id())),
                "a failed transfer reports itself through its Work");
  }
  CommDestroy(comm_, /*abort=*/false);
}

c10::Stream ProcessGroupOCCL::CommunicationStream(c10::Device device) {
  const auto index =
      static_cast<size_t>(static_cast<unsigned char>(device.index()));
  if (streams_.size() <= index) streams_.resize(index + 1);
  if (!streams_[index].has_value()) {
    streams_[index] = StreamFromPool(device.index(), /*priority=*/0);
  }
  return *streams_[index];
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::Run(
    c10d::OpType type, const char* name, c10::Device device,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs, const Enqueue& enqueue) {
  TORCH_CHECK(joined_, "occl: ", name,
              " on a process group that was shut down or aborted");
  return RunOn(CommunicationStream(device), type, name, inputs, outputs,
               enqueue);
}

void ProcessGroupOCCL::EnsureDescribed() {
  std::call_once(described_, [this] {
    const FlightRecorderSettings settings =
        FlightRecorderSettingsFromEnvironment();
    proto::FlightRecorderIdentity identity;
    identity.set_group_name(getGroupUid());
    identity.set_group_desc(getGroupDesc());
    for (const int global : global_ranks_) identity.add_group_ranks(global);
    identity.set_global_rank(global_ranks_[rank_]);
    identity.set_entries(settings.entries);
    if (settings.dump_on_timeout) identity.set_dump_prefix(settings.prefix);
    OPENREG_CHECK(CommDescribe(comm_, identity));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::RunOn(
    c10::Stream communication, c10d::OpType type, const char* name,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs, const Enqueue& enqueue) {
  TORCH_CHECK(joined_, "occl: ", name,
              " on a process group that was shut down or aborted");
  EnsureDescribed();
  const c10::Device device = communication.device();
  ++issued_;
  const c10::impl::VirtualGuardImpl impl(kOpenReg);
  const c10::Stream current = impl.getStream(device);
  // The collective reads what the caller's stream wrote before the call.
  c10::Event ready(kOpenReg);
  ready.record(current);
  ready.block(communication);
  auto future = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()),
      std::vector<c10::Device>{device});
  auto done = std::make_shared<c10::Event>(kOpenReg);
  {
    const c10::StreamGuard on_communication(communication);
    // DDP's all_reduce runs in backward (from autograd hooks): fault
    // triggers and the command profile see it there.
    StampCommandPhase();
    enqueue(static_cast<StreamId>(communication.id()));
    done->record(communication);
    // Consumers of the future wait for the communication stream.
    future->markCompleted(c10::IValue(outputs));
  }
  // The caching allocator must not reuse this memory before the
  // collective ran, whatever the caller does with its tensors.
  c10::DeviceAllocator* allocator = c10::getDeviceAllocator(kOpenReg);
  for (const std::vector<at::Tensor>* group : {&inputs, &outputs}) {
    for (const at::Tensor& tensor : *group) {
      if (tensor.numel() > 0) {
        allocator->recordStream(tensor.storage().data_ptr(), communication);
      }
    }
  }
  return c10::make_intrusive<OcclWork>(
      rank_, type, std::move(done), outputs, std::move(future),
      std::string("occl ") + name + " (rank " + std::to_string(rank_) + " of " +
          std::to_string(size_) + ")");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const c10::Device device = DeviceOf(tensors, "allreduce tensors");
  const auto [op, scale] = ToReduceOp(opts.reduceOp);
  CheckReducible(tensors, op, "all_reduce");
  return Run(c10d::OpType::ALLREDUCE, "all_reduce", device, tensors, tensors,
             [&, op = op, scale = scale](StreamId stream) {
               for (const at::Tensor& tensor : tensors) {
                 WithContiguous(tensor, true, [&](const at::Tensor& flat) {
                   if (SpansHosts()) {
                     AllReduceAcrossHosts(flat, op, scale, stream);
                     return;
                   }
                   Check(AllReduce(Address(flat), Address(flat), flat.numel(),
                                   DtypeCode(flat), op, comm_, stream, scale),
                         "AllReduce");
                 });
               }
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  c10d::AllreduceOptions each;
  each.reduceOp = opts.reduceOp;
  return allreduce(tensors, each);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const c10::Device device = DeviceOf(tensors, "broadcast tensors");
  return Run(
      c10d::OpType::BROADCAST, "broadcast", device, tensors, tensors,
      [&](StreamId stream) {
        for (const at::Tensor& tensor : tensors) {
          WithContiguous(tensor, true, [&](const at::Tensor& flat) {
            if (SpansHosts()) {
              BroadcastAcrossHosts(flat, static_cast<int>(opts.rootRank),
                                   stream);
              return;
            }
            Check(Broadcast(Address(flat), flat.numel(), DtypeCode(flat),
                            static_cast<int>(opts.rootRank), comm_, stream),
                  "Broadcast");
          });
        }
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const c10::Device device = DeviceOf(tensors, "reduce tensors");
  const auto [op, scale] = ToReduceOp(opts.reduceOp);
  CheckReducible(tensors, op, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  return Run(c10d::OpType::REDUCE, "reduce", device, tensors, tensors,
             [&, op = op, scale = scale](StreamId stream) {
               for (const at::Tensor& tensor : tensors) {
                 WithContiguous(tensor, rank_ == root,
                                [&](const at::Tensor& flat) {
                                  ReduceOnStream(flat, op, scale, root, stream);
                                });
               }
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  std::vector<at::Tensor> inputs{input}, outputs{output};
  const c10::Device device = DeviceOf(inputs, "allgather input");
  DeviceOf(outputs, "allgather output");
  TORCH_CHECK(output.numel() == input.numel() * size_,
              "occl: all_gather_into_tensor: the output has ", output.numel(),
              " elements, not the input's ", input.numel(), " x ", size_,
              " ranks");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "occl: all_gather_into_tensor: input ", input.scalar_type(),
              " and output ", output.scalar_type(), " differ");
  return Run(
      c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", device, inputs,
      outputs, [&](StreamId stream) {
        const at::Tensor flat_input = input.contiguous();
        WithContiguous(output, true, [&](const at::Tensor& flat) {
          if (SpansHosts()) {
            AllGatherAcrossHosts(flat_input, flat, stream);
            return;
          }
          Check(AllGather(Address(flat_input), Address(flat),
                          flat_input.numel(), DtypeCode(flat), comm_, stream),
                "AllGather");
        });
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
              "occl: all_gather takes one input tensor per rank");
  const c10::Device device = DeviceOf(inputs, "allgather input");
  std::vector<at::Tensor>& parts = outputs[0];
  TORCH_CHECK(static_cast<int>(parts.size()) == size_,
              "occl: all_gather: ", parts.size(), " output tensors for ", size_,
              " ranks");
  for (const at::Tensor& part : parts) {
    CheckOnDevice(part, "all_gather outputs");
    TORCH_CHECK(part.numel() == inputs[0].numel() &&
                    part.scalar_type() == inputs[0].scalar_type(),
                "occl: all_gather: every output must match the input's ",
                inputs[0].numel(), " x ", inputs[0].scalar_type());
  }
  return Run(
      c10d::OpType::ALLGATHER, "all_gather", device, inputs, parts,
      [&](StreamId stream) {
        const at::Tensor input = inputs[0].contiguous();
        const at::Tensor gathered =
            at::empty({size_ * input.numel()}, input.options());
        if (SpansHosts()) {
          AllGatherAcrossHosts(input, gathered, stream);
        } else {
          Check(AllGather(Address(input), Address(gathered), input.numel(),
                          DtypeCode(input), comm_, stream),
                "AllGather");
        }
        for (int r = 0; r < size_; ++r) {
          parts[r].copy_(gathered.narrow(0, r * input.numel(), input.numel())
                             .view(parts[r].sizes()));
        }
      });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupOCCL::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "occl: coalesced all_gather: ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) {
    last = _allgather_base(outputs[i], inputs[i], opts);
  }
  TORCH_CHECK(last, "occl: coalesced all_gather of no tensors");
  return last;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> inputs{input}, outputs{output};
  const c10::Device device = DeviceOf(inputs, "reduce_scatter input");
  DeviceOf(outputs, "reduce_scatter output");
  TORCH_CHECK(input.numel() == output.numel() * size_,
              "occl: reduce_scatter_tensor: the input has ", input.numel(),
              " elements, not the output's ", output.numel(), " x ", size_,
              " ranks");
  const auto [op, scale] = ToReduceOp(opts.reduceOp);
  CheckReducible(inputs, op, "reduce_scatter_tensor");
  return Run(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor",
             device, inputs, outputs,
             [&, op = op, scale = scale](StreamId stream) {
               const at::Tensor flat_input = input.contiguous();
               WithContiguous(output, true, [&](const at::Tensor& flat) {
                 ReduceScatterOnStream(flat_input, flat, op, scale, stream);
               });
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "occl: reduce_scatter takes one output tensor per rank");
  const c10::Device device = DeviceOf(outputs, "reduce_scatter output");
  std::vector<at::Tensor>& parts = inputs[0];
  TORCH_CHECK(static_cast<int>(parts.size()) == size_,
              "occl: reduce_scatter: ", parts.size(), " inputs for ", size_,
              " ranks");
  for (const at::Tensor& part : parts) {
    CheckOnDevice(part, "reduce_scatter inputs");
  }
  const auto [op, scale] = ToReduceOp(opts.reduceOp);
  CheckReducible(parts, op, "reduce_scatter");
  return Run(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", device, parts,
             outputs, [&, op = op, scale = scale](StreamId stream) {
               std::vector<at::Tensor> flat_parts;
               flat_parts.reserve(parts.size());
               for (const at::Tensor& part : parts) {
                 flat_parts.push_back(part.reshape({-1}));
               }
               const at::Tensor stacked = at::cat(flat_parts);
               WithContiguous(outputs[0], true, [&](const at::Tensor& flat) {
                 ReduceScatterOnStream(stacked, flat, op, scale, stream);
               });
             });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupOCCL::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "occl: coalesced reduce_scatter: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) {
    last = _reduce_scatter_base(outputs[i], inputs[i], opts);
  }
  TORCH_CHECK(last, "occl: coalesced reduce_scatter of no tensors");
  return last;
}

namespace {

// all_to_all_single's split sizes (rows of dim 0; none: equal) as element
// counts per rank.
std::vector<int64_t> SplitCounts(const at::Tensor& tensor,
                                 const std::vector<int64_t>& splits, int size,
                                 const char* what) {
  TORCH_CHECK(tensor.dim() >= 1, "occl: all_to_all_single: the ", what,
              " needs at least one dimension");
  const int64_t rows = tensor.size(0);
  const int64_t row = rows == 0 ? 0 : tensor.numel() / rows;
  std::vector<int64_t> counts;
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "occl: all_to_all_single: the ", what,
                " has ", rows, " rows, not divisible by ", size,
                " ranks; pass split sizes");
    counts.assign(size, rows / size * row);
    return counts;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size,
              "occl: all_to_all_single: ", splits.size(), " ", what,
              " split sizes for ", size, " ranks");
  int64_t total = 0;
  for (const int64_t split : splits) {
    TORCH_CHECK(split >= 0, "occl: all_to_all_single: negative split size");
    total += split;
    counts.push_back(split * row);
  }
  TORCH_CHECK(total == rows, "occl: all_to_all_single: the ", what,
              " split sizes add up to ", total, ", but it has ", rows, " rows");
  return counts;
}

}  // namespace

void ProcessGroupOCCL::AllToAllVOnStream(
    const at::Tensor& input, const std::vector<int64_t>& send_counts,
    const at::Tensor& output, const std::vector<int64_t>& recv_counts,
    StreamId stream) {
  if (!SpansHosts()) {
    const std::vector<size_t> sends(send_counts.begin(), send_counts.end());
    const std::vector<size_t> receives(recv_counts.begin(), recv_counts.end());
    Check(AllToAllV(Address(input), sends.data(), Address(output),
                    receives.data(), DtypeCode(input), comm_, stream),
          "AllToAllV");
    return;
  }
  // Every rank's counts everywhere, so that every rank checks every pair;
  // then an equal all_to_all of blocks padded to the largest.
  std::vector<int64_t> mine(send_counts);
  mine.insert(mine.end(), recv_counts.begin(), recv_counts.end());
  const at::Tensor counts = at::tensor(mine).to(input.device());
  const int64_t ranks = size_;
  const at::Tensor gathered = at::empty({ranks * 2 * ranks}, counts.options());
  AllGatherAcrossHosts(counts, gathered, stream);
  const at::Tensor all = gathered.cpu();
  const int64_t* table = all.data_ptr<int64_t>();
  int64_t largest = 0;
  for (int from = 0; from < size_; ++from) {
    for (int to = 0; to < size_; ++to) {
      const int64_t sent = table[from * 2 * ranks + to];
      const int64_t expected = table[to * 2 * ranks + ranks + from];
      TORCH_CHECK(sent == expected,
                  "occl: ranks disagree on the split sizes: rank ", from,
                  " sends ", sent, " elements to rank ", to, ", which expects ",
                  expected, " from it");
      largest = std::max(largest, sent);
    }
  }
  if (largest == 0) return;
  const at::Tensor padded_input = at::zeros({size_ * largest}, input.options());
  int64_t offset = 0;
  for (int to = 0; to < size_; ++to) {
    padded_input.narrow(0, to * largest, send_counts[to])
        .copy_(input.narrow(0, offset, send_counts[to]));
    offset += send_counts[to];
  }
  const at::Tensor padded_output = at::empty_like(padded_input);
  AllToAllOnStream(padded_input, padded_output, stream);
  offset = 0;
  for (int from = 0; from < size_; ++from) {
    output.narrow(0, offset, recv_counts[from])
        .copy_(padded_output.narrow(0, from * largest, recv_counts[from]));
    offset += recv_counts[from];
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  std::vector<at::Tensor> inputs{input}, outputs{output};
  const c10::Device device = DeviceOf(inputs, "all_to_all input");
  DeviceOf(outputs, "all_to_all output");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(),
              "occl: all_to_all_single: input is ", input.scalar_type(),
              ", output ", output.scalar_type());
  // Always the unequal form, so that ranks passing split sizes and ranks
  // passing none still meet the same collective.
  std::vector<int64_t> send_counts =
      SplitCounts(input, input_split_sizes, size_, "input");
  std::vector<int64_t> recv_counts =
      SplitCounts(output, output_split_sizes, size_, "output");
  return Run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", device, inputs,
             outputs,
             [&, send_counts = std::move(send_counts),
              recv_counts = std::move(recv_counts)](StreamId stream) {
               const at::Tensor flat_input = input.reshape({-1}).contiguous();
               WithContiguous(output, true, [&](const at::Tensor& flat) {
                 AllToAllVOnStream(flat_input, send_counts, flat.view({-1}),
                                   recv_counts, stream);
               });
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ &&
                  static_cast<int>(outputs.size()) == size_,
              "occl: all_to_all takes one input and one output per rank");
  const c10::Device device = DeviceOf(inputs, "all_to_all inputs");
  DeviceOf(outputs, "all_to_all outputs");
  std::vector<int64_t> send_counts, recv_counts;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                    outputs[r].scalar_type() == inputs[0].scalar_type(),
                "occl: all_to_all tensors of different dtypes");
    send_counts.push_back(inputs[r].numel());
    recv_counts.push_back(outputs[r].numel());
  }
  return Run(c10d::OpType::ALLTOALL, "all_to_all", device, inputs, outputs,
             [&](StreamId stream) {
               std::vector<at::Tensor> flat_inputs;
               flat_inputs.reserve(inputs.size());
               for (const at::Tensor& tensor : inputs) {
                 flat_inputs.push_back(tensor.reshape({-1}));
               }
               const at::Tensor sent = at::cat(flat_inputs);
               int64_t total = 0;
               for (const int64_t count : recv_counts) total += count;
               const at::Tensor received = at::empty({total}, sent.options());
               AllToAllVOnStream(sent, send_counts, received, recv_counts,
                                 stream);
               int64_t offset = 0;
               for (int r = 0; r < size_; ++r) {
                 outputs[r].copy_(received.narrow(0, offset, recv_counts[r])
                                      .view(outputs[r].sizes()));
                 offset += recv_counts[r];
               }
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "occl: gather takes one input tensor");
  const c10::Device device = DeviceOf(inputs, "gather input");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> parts;
  if (rank_ == root) {
    TORCH_CHECK(
        outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
        "occl: gather: the root needs one output per rank");
    parts = outputs[0];
  }
  return Run(
      c10d::OpType::GATHER, "gather", device, inputs, parts,
      [&, root](StreamId stream) {
        const at::Tensor input = inputs[0].contiguous();
        at::Tensor gathered;
        if (rank_ == root) {
          gathered = at::empty({size_ * input.numel()}, input.options());
        }
        GatherOnStream(input, gathered, root, stream);
        for (int r = 0; r < static_cast<int>(parts.size()); ++r) {
          parts[r].copy_(gathered.narrow(0, r * input.numel(), input.numel())
                             .view(parts[r].sizes()));
        }
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "occl: scatter takes one output tensor");
  const c10::Device device = DeviceOf(outputs, "scatter output");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> parts;
  if (rank_ == root) {
    TORCH_CHECK(
        inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
        "occl: scatter: the root needs one input per rank");
    parts = inputs[0];
  }
  return Run(c10d::OpType::SCATTER, "scatter", device, parts, outputs,
             [&, root](StreamId stream) {
               at::Tensor sent;
               if (rank_ == root) {
                 std::vector<at::Tensor> flat;
                 flat.reserve(parts.size());
                 for (const at::Tensor& part : parts) {
                   flat.push_back(part.reshape({-1}));
                 }
                 sent = at::cat(flat);
               }
               WithContiguous(outputs[0], true, [&](const at::Tensor& flat) {
                 ScatterOnStream(sent, flat, root, stream);
               });
             });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::barrier(
    const c10d::BarrierOptions& opts) {
  c10::DeviceIndex index = 0;
  if (!opts.device_ids.empty()) {
    index = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
  } else {
    const c10::impl::VirtualGuardImpl impl(kOpenReg);
    index = impl.getDevice().index();
  }
  const c10::Device device(kOpenReg, index);
  auto work = Run(c10d::OpType::BARRIER, "barrier", device, {}, {},
                  [&](StreamId stream) {
                    Check(Barrier(comm_, stream), "Barrier");
                    if (SpansHosts()) {
                      // Every daemon's ranks met; their first ranks meet in
                      // gloo, then each daemon's ranks again.
                      if (hosts_.local_rank == 0) {
                        OPENREG_CHECK(StreamSynchronize(stream));
                        WaitAcrossHosts(hosts_.leaders->barrier(), "barrier");
                      }
                      Check(Barrier(comm_, stream), "Barrier");
                    }
                  });
  // As NCCL's: barrier() returns once the barrier completed on the device.
  work->synchronize();
  return work;
}

c10::Stream ProcessGroupOCCL::TransferStream(c10::Device device, int peer,
                                             bool sending) {
  const auto key = std::make_tuple(device.index(), peer, sending);
  auto found = transfer_streams_.find(key);
  if (found == transfer_streams_.end()) {
    found = transfer_streams_.emplace(key, NewDedicatedStream(device.index()))
                .first;
  }
  return found->second;
}

int ProcessGroupOCCL::LocalRankOf(int peer) const {
  if (!SpansHosts()) return peer;
  const int host = hosts_.host_of_rank[peer];
  if (host != hosts_.host_of_rank[rank_]) return -1;
  int local = 0;
  for (int r = 0; r < peer; ++r) local += hosts_.host_of_rank[r] == host;
  return local;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::Transfer(
    std::vector<at::Tensor>& tensors, int peer, bool sending) {
  const char* name = sending ? "send" : "recv";
  TORCH_CHECK(tensors.size() == 1, "occl: ", name, " takes one tensor");
  TORCH_CHECK(peer >= 0 && peer < size_, "occl: ", name, ": peer ", peer,
              " is outside a group of ", size_, " ranks");
  TORCH_CHECK(peer != rank_, "occl: ", name, " to or from itself (rank ", rank_,
              ")");
  const c10::Device device =
      DeviceOf(tensors, sending ? "send tensor" : "recv tensor");
  const at::Tensor tensor = tensors[0];
  const int local_peer = LocalRankOf(peer);
  const std::vector<at::Tensor> none;
  const std::vector<at::Tensor>& inputs = sending ? tensors : none;
  const std::vector<at::Tensor>& outputs = sending ? none : tensors;
  if (local_peer < 0) {
    // Another daemon: through host memory and the gloo group of every
    // rank. gloo posts the transfer and returns; a recv's data reaches the
    // device when its Work is waited on or seen completed.
    TORCH_CHECK(hosts_.everyone, "occl: ", name,
                " across daemons without the gloo group of every rank");
    TORCH_CHECK(joined_, "occl: ", name,
                " on a process group that was shut down or aborted");
    ++issued_;
    std::vector<at::Tensor> host;
    if (sending) {
      host.push_back(tensor.to(at::kCPU).contiguous());
      return c10::make_intrusive<HostTransferWork>(
          rank_, c10d::OpType::SEND, hosts_.everyone->send(host, peer, 0),
          host[0], at::Tensor());
    }
    host.push_back(
        at::empty(tensor.sizes(), tensor.options().device(at::kCPU)));
    return c10::make_intrusive<HostTransferWork>(
        rank_, c10d::OpType::RECV, hosts_.everyone->recv(host, peer, 0),
        host[0], tensor);
  }
  const c10::Stream stream = TransferStream(device, peer, sending);
  return RunOn(stream, sending ? c10d::OpType::SEND : c10d::OpType::RECV, name,
               inputs, outputs, [&](StreamId on) {
                 WithContiguous(tensor, !sending, [&](const at::Tensor& flat) {
                   Check(sending ? Send(Address(flat), flat.numel(),
                                        DtypeCode(flat), local_peer, comm_, on)
                                 : Recv(Address(flat), flat.numel(),
                                        DtypeCode(flat), local_peer, comm_, on),
                         name);
                 });
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::send(
    std::vector<at::Tensor>& tensors, int dst_rank, int /*tag*/) {
  return Transfer(tensors, dst_rank, /*sending=*/true);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::recv(
    std::vector<at::Tensor>& tensors, int src_rank, int /*tag*/) {
  return Transfer(tensors, src_rank, /*sending=*/false);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOCCL::recvAnysource(
    std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false,
              "occl: recv from any source is not supported (as in NCCL)");
}

}  // namespace openreg::torch_backend
