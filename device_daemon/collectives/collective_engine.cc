#include "device_daemon/collectives/collective_engine.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/dtype.h"
#include "device_daemon/base/errors.h"
#include "device_daemon/base/log.h"
#include "device_daemon/collectives/flight_recorder_trace.h"
#include "device_daemon/sessions/session.h"

namespace openreg::daemon {
namespace {

// Reductions go through a buffer of this size, so that each rank's memory
// is read once and written once, and the partial sums stay in cache.
constexpr int64_t kChunkBytes = int64_t{256} * 1024;

// What one rank's part reads and writes, pinned in its session.
struct RankBuffers {
  PinnedRange send;
  PinnedRange recv;
  uint64_t send_bytes = 0;
  uint64_t recv_bytes = 0;
  // ALL_TO_ALLV: elements for (from) each rank, in rank order.
  std::vector<uint64_t> send_counts;
  std::vector<uint64_t> recv_counts;
};

// What a collective's rank 0 and every other rank must agree on.
struct Shape {
  proto::CollectiveKind kind = proto::COLLECTIVE_UNSPECIFIED;
  proto::ReduceOp op = proto::REDUCE_OP_UNSPECIFIED;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  int64_t element_bytes = 0;
  int64_t count = 0;
  int root = 0;
  double scale = 1.0;
  int size = 0;
};

std::string LowerName(proto::CollectiveKind kind) {
  return absl::AsciiStrToLower(proto::CollectiveKind_Name(kind));
}

bool Reduces(proto::CollectiveKind kind) {
  return kind == proto::ALL_REDUCE || kind == proto::REDUCE ||
         kind == proto::REDUCE_SCATTER;
}

bool PointToPoint(proto::CollectiveKind kind) {
  return kind == proto::SEND || kind == proto::RECV;
}

bool RootedAt(proto::CollectiveKind kind) {
  return kind == proto::BROADCAST || kind == proto::REDUCE ||
         kind == proto::GATHER || kind == proto::SCATTER;
}

// The signature every rank's part must match: readable in a mismatch
// message ("all_reduce(sum) of 1024 x Float").
std::string Signature(const Shape& shape) {
  std::string text = LowerName(shape.kind);
  if (Reduces(shape.kind)) {
    absl::StrAppend(&text, "(",
                    absl::AsciiStrToLower(proto::ReduceOp_Name(shape.op)));
    if (shape.op == proto::PREMUL_SUM) {
      absl::StrAppend(&text, " x ", shape.scale);
    }
    absl::StrAppend(&text, ")");
  }
  if (shape.kind == proto::ALL_TO_ALLV) {
    absl::StrAppend(&text, " of ", c10::toString(shape.dtype));
  } else if (shape.kind != proto::BARRIER) {
    absl::StrAppend(&text, " of ", shape.count, " x ",
                    c10::toString(shape.dtype));
  }
  if (RootedAt(shape.kind)) absl::StrAppend(&text, " from root ", shape.root);
  return text;
}

// A point-to-point transfer's signature, the same on both sides when they
// agree ("1024 x Float from rank 0 to rank 1").
std::string TransferSignature(const Shape& shape, int from, int to) {
  return absl::StrCat(shape.count, " x ", c10::toString(shape.dtype),
                      " from rank ", from, " to rank ", to);
}

// Bytes of `elements` elements, refusing overflow.
absl::StatusOr<uint64_t> Bytes(const Shape& shape, int64_t blocks) {
  const uint64_t limit = uint64_t{1} << 50;
  const uint64_t elements = static_cast<uint64_t>(shape.count);
  if (elements > limit / static_cast<uint64_t>(blocks) /
                     static_cast<uint64_t>(shape.element_bytes)) {
    return InvalidValueError(absl::StrCat("a collective of ", shape.count,
                                          " elements is too large"));
  }
  return elements * static_cast<uint64_t>(blocks) *
         static_cast<uint64_t>(shape.element_bytes);
}

absl::StatusOr<Shape> ValidateShape(const proto::Collective& collective,
                                    int size) {
  Shape shape;
  shape.kind = collective.kind();
  shape.op = collective.op();
  shape.size = size;
  shape.root = collective.root();
  shape.scale = collective.scale();
  if (shape.kind <= proto::COLLECTIVE_UNSPECIFIED ||
      !proto::CollectiveKind_IsValid(shape.kind)) {
    return InvalidValueError(
        absl::StrCat("unknown collective kind ", collective.kind()));
  }
  if (RootedAt(shape.kind) && (shape.root < 0 || shape.root >= size)) {
    return InvalidValueError(absl::StrCat(
        "root ", shape.root, " is outside a communicator of ", size, " ranks"));
  }
  if (PointToPoint(shape.kind) &&
      (collective.peer() < 0 || collective.peer() >= size)) {
    return InvalidValueError(absl::StrCat("peer ", collective.peer(),
                                          " is outside a communicator of ",
                                          size, " ranks"));
  }
  if (shape.kind == proto::ALL_TO_ALLV &&
      (collective.send_counts_size() != size ||
       collective.recv_counts_size() != size)) {
    return InvalidValueError(absl::StrCat(
        "all_to_allv needs one send and one receive count per rank (", size,
        "), not ", collective.send_counts_size(), " and ",
        collective.recv_counts_size()));
  }
  if (shape.kind == proto::BARRIER) return shape;
  shape.element_bytes = DtypeElementSize(collective.dtype());
  if (shape.element_bytes <= 0) {
    return InvalidValueError(
        absl::StrCat("unknown dtype ", collective.dtype()));
  }
  shape.dtype = static_cast<c10::ScalarType>(collective.dtype());
  if (collective.count() > (uint64_t{1} << 50)) {
    return InvalidValueError(absl::StrCat(
        "a collective of ", collective.count(), " elements is too large"));
  }
  shape.count = static_cast<int64_t>(collective.count());
  if (Reduces(shape.kind)) {
    if (shape.op <= proto::REDUCE_OP_UNSPECIFIED ||
        !proto::ReduceOp_IsValid(shape.op)) {
      return InvalidValueError(
          absl::StrCat("unknown reduction ", collective.op()));
    }
    const bool floating =
        c10::isFloatingType(shape.dtype) || c10::isComplexType(shape.dtype);
    if ((shape.op == proto::AVG || shape.op == proto::PREMUL_SUM) &&
        !floating) {
      return InvalidValueError(absl::StrCat(
          absl::AsciiStrToLower(proto::ReduceOp_Name(shape.op)),
          " needs a floating-point dtype, not ", c10::toString(shape.dtype)));
    }
    if ((shape.op == proto::MIN || shape.op == proto::MAX) &&
        c10::isComplexType(shape.dtype)) {
      return InvalidValueError(absl::StrCat("min and max are not defined for ",
                                            c10::toString(shape.dtype)));
    }
    if (c10::isFloat8Type(shape.dtype) || c10::isQIntType(shape.dtype) ||
        c10::isBitsType(shape.dtype)) {
      return InvalidValueError(absl::StrCat(
          "reductions of ", c10::toString(shape.dtype),
          " are not supported (move the data with all_gather, or reduce in "
          "a wider dtype)"));
    }
  }
  return shape;
}

// (send blocks, recv blocks) of rank `rank`'s part, in units of `count`.
std::pair<int64_t, int64_t> Blocks(const Shape& shape, int rank) {
  const bool root = rank == shape.root;
  switch (shape.kind) {
    case proto::ALL_REDUCE:
      return {1, 1};
    case proto::BROADCAST:
      return {0, 1};
    case proto::REDUCE:
      return {1, root ? 1 : 0};
    case proto::ALL_GATHER:
      return {1, shape.size};
    case proto::REDUCE_SCATTER:
      return {shape.size, 1};
    case proto::ALL_TO_ALL:
      return {shape.size, shape.size};
    case proto::GATHER:
      return {1, root ? shape.size : 0};
    case proto::SCATTER:
      return {root ? shape.size : 0, 1};
    case proto::SEND:
      return {1, 0};
    case proto::RECV:
      return {0, 1};
    default:
      return {0, 0};
  }
}

// The sum of `counts`, in bytes of `shape`'s dtype, refusing overflow.
absl::StatusOr<uint64_t> SumBytes(
    const Shape& shape, const google::protobuf::RepeatedField<uint64_t>& counts,
    const char* role) {
  const uint64_t limit = uint64_t{1} << 50;
  uint64_t elements = 0;
  for (const uint64_t count : counts) {
    if (count > limit || elements > limit - count) {
      return InvalidValueError(
          absl::StrCat("all_to_allv ", role, " counts are too large"));
    }
    elements += count;
  }
  if (elements > limit / static_cast<uint64_t>(shape.element_bytes)) {
    return InvalidValueError(
        absl::StrCat("all_to_allv ", role, " counts are too large"));
  }
  return elements * static_cast<uint64_t>(shape.element_bytes);
}

// ALL_TO_ALLV: the counts, and the bytes they add up to.
absl::Status SizeVariablePart(const proto::Collective& collective,
                              const Shape& shape, RankBuffers* buffers) {
  absl::StatusOr<uint64_t> send_bytes =
      SumBytes(shape, collective.send_counts(), "send");
  if (!send_bytes.ok()) return send_bytes.status();
  absl::StatusOr<uint64_t> recv_bytes =
      SumBytes(shape, collective.recv_counts(), "receive");
  if (!recv_bytes.ok()) return recv_bytes.status();
  buffers->send_counts.assign(collective.send_counts().begin(),
                              collective.send_counts().end());
  buffers->recv_counts.assign(collective.recv_counts().begin(),
                              collective.recv_counts().end());
  buffers->send_bytes = *send_bytes;
  buffers->recv_bytes = *recv_bytes;
  return absl::OkStatus();
}

// Every other kind: whole blocks of `count` elements.
absl::Status SizePart(const Shape& shape, int rank, RankBuffers* buffers) {
  const auto [send_blocks, recv_blocks] = Blocks(shape, rank);
  absl::StatusOr<uint64_t> send_bytes =
      Bytes(shape, std::max<int64_t>(send_blocks, 1));
  if (!send_bytes.ok()) return send_bytes.status();
  absl::StatusOr<uint64_t> recv_bytes =
      Bytes(shape, std::max<int64_t>(recv_blocks, 1));
  if (!recv_bytes.ok()) return recv_bytes.status();
  buffers->send_bytes = send_blocks > 0 ? *send_bytes : 0;
  buffers->recv_bytes = recv_blocks > 0 ? *recv_bytes : 0;
  return absl::OkStatus();
}

absl::Status PinPart(const StreamContext& context,
                     const proto::Collective& collective, const Shape& shape,
                     int rank, RankBuffers* buffers) {
  if (shape.kind == proto::BARRIER) return absl::OkStatus();
  absl::Status sized = shape.kind == proto::ALL_TO_ALLV
                           ? SizeVariablePart(collective, shape, buffers)
                           : SizePart(shape, rank, buffers);
  if (!sized.ok()) return sized;
  if (buffers->send_bytes > 0) {
    absl::StatusOr<PinnedRange> send =
        context.session->PinRange(collective.send(), buffers->send_bytes);
    if (!send.ok()) return send.status();
    buffers->send = *std::move(send);
  }
  if (buffers->recv_bytes > 0) {
    absl::StatusOr<PinnedRange> recv =
        context.session->PinRange(collective.recv(), buffers->recv_bytes);
    if (!recv.ok()) return recv.status();
    buffers->recv = *std::move(recv);
  }
  const bool exchanges =
      shape.kind == proto::ALL_TO_ALL || shape.kind == proto::ALL_TO_ALLV;
  if (exchanges && buffers->send_bytes > 0 && buffers->recv_bytes > 0) {
    const char* send = buffers->send.data;
    const char* recv = buffers->recv.data;
    if (send < recv + buffers->recv_bytes &&
        recv < send + buffers->send_bytes) {
      return InvalidValueError(
          "all_to_all needs separate send and receive memory");
    }
  }
  return absl::OkStatus();
}

at::Tensor View(char* data, int64_t offset, int64_t count, const Shape& shape) {
  return at::from_blob(data + offset * shape.element_bytes, {count},
                       at::TensorOptions().dtype(shape.dtype));
}

// result = reduction, in rank order, of `count` elements at element
// `offset` of each part's send buffer plus `block_offset` (the order the
// header states). `result` may be one of those parts' memory: each element
// is read before it is written.
void ReduceInto(const Shape& shape,
                const std::vector<const RankBuffers*>& ranks,
                int64_t block_offset, int64_t offset, int64_t count,
                at::Tensor& result) {
  const auto part = [&](size_t rank) {
    return View(ranks[rank]->send.data, block_offset + offset, count, shape);
  };
  size_t next = 1;
  if (shape.op == proto::PREMUL_SUM) {
    at::mul_out(result, part(0), shape.scale);
  } else if (ranks.size() == 1) {
    result.copy_(part(0));
  } else {
    // The first step reads two parts at once: one pass fewer over result.
    switch (shape.op) {
      case proto::SUM:
      case proto::AVG:
        at::add_out(result, part(0), part(1));
        break;
      case proto::PRODUCT:
        at::mul_out(result, part(0), part(1));
        break;
      case proto::MIN:
        at::minimum_out(result, part(0), part(1));
        break;
      case proto::MAX:
        at::maximum_out(result, part(0), part(1));
        break;
      default:
        break;
    }
    next = 2;
  }
  for (size_t rank = next; rank < ranks.size(); ++rank) {
    const at::Tensor value = part(rank);
    switch (shape.op) {
      case proto::SUM:
      case proto::AVG:
        result.add_(value);
        break;
      case proto::PREMUL_SUM:
        result.add_(value, shape.scale);
        break;
      case proto::PRODUCT:
        result.mul_(value);
        break;
      case proto::MIN:
        at::minimum_out(result, result, value);
        break;
      case proto::MAX:
        at::maximum_out(result, result, value);
        break;
      default:
        break;
    }
  }
  if (shape.op == proto::AVG) result.div_(static_cast<double>(ranks.size()));
}

// Whether [a, a + bytes) and [b, b + bytes) overlap.
bool Overlap(const char* a, const char* b, uint64_t bytes) {
  return a < b + bytes && b < a + bytes;
}

// Reduces block `block` of every rank's send buffer into `targets`, a
// chunk at a time: into the first target's memory, then copied from there
// while it is in cache. When that memory is a part other than rank 0's (an
// in-place reduce to root 2, say), a part would be overwritten before it is
// read: the chunk goes through a scratch buffer instead.
void ReduceBlock(const Shape& shape,
                 const std::vector<const RankBuffers*>& ranks, int64_t block,
                 const std::vector<char*>& targets) {
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / shape.element_bytes);
  const uint64_t block_bytes =
      static_cast<uint64_t>(shape.count) * shape.element_bytes;
  bool aliased = false;
  for (size_t rank = 1; rank < ranks.size(); ++rank) {
    aliased = aliased ||
              Overlap(targets[0], ranks[rank]->send.data + block * block_bytes,
                      block_bytes);
  }
  at::Tensor scratch;
  if (aliased) {
    scratch = at::empty({std::min(chunk, shape.count)},
                        at::TensorOptions().dtype(shape.dtype));
  }
  for (int64_t offset = 0; offset < shape.count; offset += chunk) {
    const int64_t length = std::min(chunk, shape.count - offset);
    at::Tensor result = aliased ? scratch.narrow(0, 0, length)
                                : View(targets[0], offset, length, shape);
    ReduceInto(shape, ranks, block * shape.count, offset, length, result);
    const char* reduced = static_cast<const char*>(result.data_ptr());
    for (size_t i = aliased ? 0 : 1; i < targets.size(); ++i) {
      std::memcpy(targets[i] + offset * shape.element_bytes, reduced,
                  length * shape.element_bytes);
    }
  }
}

void Move(char* to, const char* from, uint64_t bytes) {
  if (bytes != 0 && to != from) std::memmove(to, from, bytes);
}

// ALL_TO_ALLV: every pair's counts must agree before anything moves.
absl::Status ExchangeVariable(const Shape& shape,
                              const std::vector<const RankBuffers*>& ranks) {
  const int n = shape.size;
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      const uint64_t sent = ranks[from]->send_counts[to];
      const uint64_t expected = ranks[to]->recv_counts[from];
      if (sent != expected) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ranks disagree on the split sizes: rank ", from, " sends ", sent,
            " elements to rank ", to, ", which expects ", expected,
            " from it (every rank's input split for q must equal rank q's "
            "output split for it)"));
      }
    }
  }
  const auto element_bytes = static_cast<uint64_t>(shape.element_bytes);
  // Block offsets, in bytes: send_offsets[r][q] is where rank r's block for
  // q starts, recv_offsets[r][q] where its block from q goes.
  std::vector<std::vector<uint64_t>> send_offsets(n), recv_offsets(n);
  for (int rank = 0; rank < n; ++rank) {
    uint64_t send_at = 0;
    uint64_t recv_at = 0;
    for (int peer = 0; peer < n; ++peer) {
      send_offsets[rank].push_back(send_at);
      recv_offsets[rank].push_back(recv_at);
      send_at += ranks[rank]->send_counts[peer] * element_bytes;
      recv_at += ranks[rank]->recv_counts[peer] * element_bytes;
    }
  }
  for (int to = 0; to < n; ++to) {
    for (int from = 0; from < n; ++from) {
      Move(ranks[to]->recv.data + recv_offsets[to][from],
           ranks[from]->send.data + send_offsets[from][to],
           ranks[from]->send_counts[to] * element_bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status Execute(const Shape& shape,
                     const std::vector<const RankBuffers*>& ranks) {
  const int n = shape.size;
  const uint64_t block_bytes =
      static_cast<uint64_t>(shape.count) * shape.element_bytes;
  switch (shape.kind) {
    case proto::BARRIER:
      return absl::OkStatus();
    case proto::ALL_REDUCE: {
      std::vector<char*> targets;
      targets.reserve(ranks.size());
      for (const RankBuffers* rank : ranks) targets.push_back(rank->recv.data);
      ReduceBlock(shape, ranks, 0, targets);
      return absl::OkStatus();
    }
    case proto::REDUCE:
      ReduceBlock(shape, ranks, 0, {ranks[shape.root]->recv.data});
      return absl::OkStatus();
    case proto::REDUCE_SCATTER:
      for (int rank = 0; rank < n; ++rank) {
        ReduceBlock(shape, ranks, rank, {ranks[rank]->recv.data});
      }
      return absl::OkStatus();
    case proto::BROADCAST:
      for (int rank = 0; rank < n; ++rank) {
        Move(ranks[rank]->recv.data, ranks[shape.root]->recv.data, block_bytes);
      }
      return absl::OkStatus();
    case proto::ALL_GATHER:
      for (int to = 0; to < n; ++to) {
        for (int from = 0; from < n; ++from) {
          Move(ranks[to]->recv.data + from * block_bytes,
               ranks[from]->send.data, block_bytes);
        }
      }
      return absl::OkStatus();
    case proto::GATHER:
      for (int from = 0; from < n; ++from) {
        Move(ranks[shape.root]->recv.data + from * block_bytes,
             ranks[from]->send.data, block_bytes);
      }
      return absl::OkStatus();
    case proto::SCATTER:
      for (int to = 0; to < n; ++to) {
        Move(ranks[to]->recv.data,
             ranks[shape.root]->send.data + to * block_bytes, block_bytes);
      }
      return absl::OkStatus();
    case proto::ALL_TO_ALL:
      for (int to = 0; to < n; ++to) {
        for (int from = 0; from < n; ++from) {
          Move(ranks[to]->recv.data + from * block_bytes,
               ranks[from]->send.data + to * block_bytes, block_bytes);
        }
      }
      return absl::OkStatus();
    case proto::ALL_TO_ALLV:
      return ExchangeVariable(shape, ranks);
    default:
      return InvalidValueError("unknown collective kind");
  }
}

// The flight recorder's view of a collective this rank issued.
FlightRecorder::Op RecordedOp(const proto::Collective& collective,
                              const Shape& shape) {
  FlightRecorder::Op op;
  op.name = LowerName(shape.kind);
  if (shape.kind == proto::ALL_TO_ALLV) op.name = "all_to_all";
  op.point_to_point = PointToPoint(shape.kind);
  op.peer = collective.peer();
  op.number = collective.number();
  op.dtype = c10::toString(shape.dtype);
  const int64_t count = shape.count;
  const int64_t all = count * shape.size;
  switch (shape.kind) {
    case proto::ALL_GATHER:
    case proto::GATHER:
      op.input_numel = count;
      op.output_numel = all;
      break;
    case proto::REDUCE_SCATTER:
    case proto::SCATTER:
      op.input_numel = all;
      op.output_numel = count;
      break;
    case proto::ALL_TO_ALL:
      op.input_numel = op.output_numel = all;
      break;
    case proto::ALL_TO_ALLV:
      for (const uint64_t sent : collective.send_counts()) {
        op.input_numel += static_cast<int64_t>(sent);
      }
      for (const uint64_t received : collective.recv_counts()) {
        op.output_numel += static_cast<int64_t>(received);
      }
      break;
    default:
      op.input_numel = op.output_numel = count;
  }
  return op;
}

// A 1-D tensor of `bytes` of `shape`'s dtype at `address` on `device`.
proto::TensorRef Extent(uint64_t address, uint64_t bytes, const Shape& shape,
                        int device) {
  proto::TensorRef tensor;
  tensor.set_address(address);
  tensor.add_sizes(static_cast<int64_t>(bytes) / shape.element_bytes);
  tensor.add_strides(1);
  tensor.set_dtype(static_cast<int32_t>(shape.dtype));
  tensor.set_device(device);
  return tensor;
}

}  // namespace

absl::StatusOr<CollectiveView> CollectiveEngine::View(
    const StreamContext& context, const proto::Collective& collective) {
  absl::StatusOr<Communicators::Membership> membership =
      communicators_->Find(context.session->id(), collective.communicator());
  if (!membership.ok()) return membership.status();
  Communicator& communicator = *membership->communicator;
  CollectiveView view;
  view.rank = membership->rank;
  view.size = communicator.size();
  const proto::FlightRecorderIdentity identity =
      communicator.recorder().Identity(view.rank);
  view.group = identity.group_name();
  view.group_desc = identity.group_desc();
  absl::StatusOr<Shape> shape = ValidateShape(collective, communicator.size());
  if (!shape.ok()) return shape.status();
  if (shape->kind == proto::BARRIER) return view;
  RankBuffers sizes;
  absl::Status sized = shape->kind == proto::ALL_TO_ALLV
                           ? SizeVariablePart(collective, *shape, &sizes)
                           : SizePart(*shape, view.rank, &sizes);
  if (!sized.ok()) return sized;
  const int device = context.device;
  if (sizes.send_bytes > 0) {
    view.contribution.push_back(
        Extent(collective.send(), sizes.send_bytes, *shape, device));
  }
  const bool root = view.rank == shape->root;
  if (shape->kind == proto::BROADCAST && root) {
    // The root's buffer is what everyone receives, and is not written.
    view.contribution.push_back(
        Extent(collective.recv(), sizes.recv_bytes, *shape, device));
  } else if (sizes.recv_bytes > 0) {
    view.delivered.push_back(
        Extent(collective.recv(), sizes.recv_bytes, *shape, device));
  }
  return view;
}

void CollectiveEngine::DumpOnTimeout(Communicator& communicator, int rank,
                                     pid_t pid) {
  if (!communicator.TakeTimeoutDump()) return;
  std::string prefix;
  for (const FlightRecorder::RankRecord& record :
       communicator.recorder().Snapshot()) {
    if (record.rank == rank) prefix = record.identity.dump_prefix();
  }
  if (prefix.empty()) return;
  const absl::Status written = WriteFlightRecorderTraces(
      FlightRecorderTraces(communicators_->JobOf(pid)), prefix);
  if (written.ok()) {
    Log(LogLevel::kInfo, "collective timeout on communicator ",
        communicator.id(), ": flight recorder traces written to ", prefix,
        "<rank>");
  } else {
    Log(LogLevel::kWarning, written.message());
  }
}

absl::Status CollectiveEngine::Run(const StreamContext& context,
                                   const proto::Collective& collective) {
  absl::StatusOr<Communicators::Membership> membership =
      communicators_->Find(context.session->id(), collective.communicator());
  if (!membership.ok()) return membership.status();
  Communicator& communicator = *membership->communicator;
  const int rank = membership->rank;
  std::string where = absl::StrCat("occl ", LowerName(collective.kind()), " #",
                                   collective.number());
  if (PointToPoint(collective.kind())) {
    absl::StrAppend(&where, collective.kind() == proto::SEND ? " to" : " from",
                    " rank ", collective.peer());
  }
  absl::StrAppend(&where, " on communicator ", communicator.id(), " (rank ",
                  rank, " of ", communicator.size(), ")");
  absl::StatusOr<Shape> shape = ValidateShape(collective, communicator.size());
  if (!shape.ok()) {
    // The others would wait for this rank until their deadline: fail them
    // now, naming it (the client library refuses these at the call).
    absl::Status refused =
        MakeError(ErrorCodeOf(shape.status()),
                  absl::StrCat(where, ": ", shape.status().message()));
    communicator.Abort(
        MakeError(proto::COLLECTIVE_FAILURE,
                  absl::StrCat(where, ": ", communicator.DescribeRank(rank),
                               " issued a collective the daemon refuses: ",
                               shape.status().message())));
    return refused;
  }
  FlightRecorder& recorder = communicator.recorder();
  const std::optional<uint64_t> record =
      recorder.Started(rank, RecordedOp(collective, *shape));
  const auto finish = [&](const absl::Status& outcome) {
    if (record.has_value()) recorder.Finished(rank, *record, outcome);
    return outcome;
  };
  // A transfer meets its peer on the pair's channel, in the sender's place
  // (0) or the receiver's (1); a collective meets every rank.
  const bool sends = shape->kind == proto::SEND;
  const int from = sends ? rank : collective.peer();
  const int to = sends ? collective.peer() : rank;
  Rendezvous& rendezvous = PointToPoint(shape->kind)
                               ? communicator.Channel(from, to)
                               : communicator.rendezvous();
  const int place = PointToPoint(shape->kind) ? (sends ? 0 : 1) : rank;
  auto buffers = std::make_shared<RankBuffers>();
  if (absl::Status pinned =
          PinPart(context, collective, *shape, rank, buffers.get());
      !pinned.ok()) {
    // The others would wait for this rank until their deadline: fail them
    // now, naming why.
    absl::Status why =
        MakeError(proto::COLLECTIVE_FAILURE,
                  absl::StrCat(where, ": ", communicator.DescribeRank(rank),
                               " passed bad memory: ", pinned.message()));
    communicator.Abort(why);
    return finish(why);
  }
  Rendezvous::Part part{PointToPoint(shape->kind)
                            ? TransferSignature(*shape, from, to)
                            : Signature(*shape),
                        buffers};
  const Shape agreed = *shape;
  const Rendezvous::Runner run =
      [&agreed](absl::Span<const Rendezvous::Part* const> parts) {
        std::vector<const RankBuffers*> ranks;
        ranks.reserve(parts.size());
        for (const Rendezvous::Part* each : parts) {
          ranks.push_back(static_cast<const RankBuffers*>(each->payload.get()));
        }
        if (PointToPoint(agreed.kind)) {
          Move(ranks[1]->recv.data, ranks[0]->send.data, ranks[0]->send_bytes);
          return absl::OkStatus();
        }
        try {
          const c10::InferenceMode inference_mode;
          return Execute(agreed, ranks);
        } catch (const std::exception& error) {
          return absl::InvalidArgumentError(error.what());
        }
      };
  absl::Status status =
      rendezvous.Arrive(place, collective.number(), std::move(part), run,
                        absl::Now() + communicator.timeout(),
                        [&context] { return context.stop_requested(); });
  if (status.ok()) return finish(status);
  absl::Status failed = MakeError(proto::COLLECTIVE_FAILURE,
                                  absl::StrCat(where, ": ", status.message()));
  // As NCCL's communicators after an error: nothing more runs on it.
  communicator.Abort(failed);
  finish(failed);
  if (absl::IsDeadlineExceeded(status)) {
    DumpOnTimeout(communicator, rank, context.session->pid());
  }
  return failed;
}

void CollectiveEngine::SessionClosed(uint64_t session_id) {
  communicators_->SessionClosed(session_id);
}

}  // namespace openreg::daemon
