#include "runtime_client/command_encoding.h"

#include <cstring>
#include <string>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "runtime_client/command_phase.h"

namespace openreg::client {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

// The tags of the fields written by hand, from the generated field numbers
// (protos/commands.proto).
constexpr uint32_t kCommandSequenceTag = WireFormatLite::MakeTag(
    proto::Command::kSequenceFieldNumber, WireFormatLite::WIRETYPE_VARINT);
constexpr uint32_t kCommandLaunchTag =
    WireFormatLite::MakeTag(proto::Command::kLaunchFieldNumber,
                            WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kCommandPhaseTag = WireFormatLite::MakeTag(
    proto::Command::kPhaseFieldNumber, WireFormatLite::WIRETYPE_VARINT);
constexpr uint32_t kCommandCorrelationTag = WireFormatLite::MakeTag(
    proto::Command::kCorrelationIdFieldNumber, WireFormatLite::WIRETYPE_VARINT);
constexpr uint32_t kLaunchSynchronousTag = WireFormatLite::MakeTag(
    proto::LaunchOp::kSynchronousFieldNumber, WireFormatLite::WIRETYPE_VARINT);
// `true` as a varint.
constexpr uint8_t kVarintTrue = 1;

std::string& Buffer() {
  thread_local std::string buffer;
  return buffer;
}

// Command{sequence, launch = <the body write_body writes, body_bytes
// long>}, then the thread's phase and correlation id. The encoding of a
// Command is its fields one after the other, so they are written by hand
// around the body: a LaunchOp can carry large host tensors, and wrapping
// it in a Command would copy it. The command's phase (when not the
// default, forward) and the profiler's correlation id (when profiling)
// follow the body.
template <typename WriteBody>
absl::string_view EncodeLaunchAround(uint64_t sequence, size_t body_bytes,
                                     WriteBody write_body) {
  const uint32_t phase = static_cast<uint32_t>(ThreadCommandPhase());
  const uint64_t correlation = ThreadCorrelationId();
  const size_t total =
      CodedOutputStream::VarintSize32(kCommandSequenceTag) +
      CodedOutputStream::VarintSize64(sequence) +
      CodedOutputStream::VarintSize32(kCommandLaunchTag) +
      CodedOutputStream::VarintSize64(body_bytes) + body_bytes +
      (phase != 0 ? CodedOutputStream::VarintSize32(kCommandPhaseTag) +
                        CodedOutputStream::VarintSize32(phase)
                  : 0) +
      (correlation != 0
           ? CodedOutputStream::VarintSize32(kCommandCorrelationTag) +
                 CodedOutputStream::VarintSize64(correlation)
           : 0);
  std::string& buffer = Buffer();
  buffer.resize(total);
  uint8_t* out = reinterpret_cast<uint8_t*>(buffer.data());
  out = CodedOutputStream::WriteTagToArray(kCommandSequenceTag, out);
  out = CodedOutputStream::WriteVarint64ToArray(sequence, out);
  out = CodedOutputStream::WriteTagToArray(kCommandLaunchTag, out);
  out = CodedOutputStream::WriteVarint64ToArray(body_bytes, out);
  out = write_body(out);
  if (phase != 0) {
    out = CodedOutputStream::WriteTagToArray(kCommandPhaseTag, out);
    out = CodedOutputStream::WriteVarint32ToArray(phase, out);
  }
  if (correlation != 0) {
    out = CodedOutputStream::WriteTagToArray(kCommandCorrelationTag, out);
    out = CodedOutputStream::WriteVarint64ToArray(correlation, out);
  }
  return buffer;
}

}  // namespace

absl::string_view EncodeCommand(const proto::Command& command) {
  std::string& buffer = Buffer();
  buffer.resize(command.ByteSizeLong());
  command.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(buffer.data()));
  return buffer;
}

absl::string_view EncodeLaunchCommand(uint64_t sequence,
                                      const proto::LaunchOp& op,
                                      bool force_synchronous) {
  // For a synchronous launch, a trailing `synchronous: true` field is
  // appended to the embedded message: protobuf parsers keep the last value
  // of a repeated scalar field, so the daemon sees synchronous = true
  // without the op being copied.
  const size_t op_bytes = op.ByteSizeLong();
  const size_t synchronous_bytes =
      force_synchronous
          ? CodedOutputStream::VarintSize32(kLaunchSynchronousTag) +
                sizeof(kVarintTrue)
          : 0;
  return EncodeLaunchAround(
      sequence, op_bytes + synchronous_bytes, [&](uint8_t* out) {
        out = op.SerializeWithCachedSizesToArray(out);
        if (force_synchronous) {
          out = CodedOutputStream::WriteTagToArray(kLaunchSynchronousTag, out);
          *out++ = kVarintTrue;
        }
        return out;
      });
}

absl::string_view EncodeSerializedLaunchCommand(uint64_t sequence,
                                                absl::string_view op) {
  return EncodeLaunchAround(sequence, op.size(), [&](uint8_t* out) {
    std::memcpy(out, op.data(), op.size());
    return out + op.size();
  });
}

}  // namespace openreg::client
