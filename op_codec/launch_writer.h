// Writes the wire bytes of a proto::LaunchOp (protos/commands.proto)
// straight from ATen values, for the client's per-op path: building a
// proto::LaunchOp, measuring it and serializing it took about a fifth of a
// small op's time in the client (docs/ARCHITECTURE.md, "The cost of one
// op"), most of it in allocating, clearing and freeing the nested messages.
//
// Contract: for the values it accepts, the bytes are exactly what
// proto::LaunchOp::SerializeAsString() gives for the message that
// EncodeValue (op_codec.h) and EncodeTensorRef build with the client's rule
// for tensors (an openreg tensor as a TensorRef, a CPU tensor by value), so
// the daemon parses one format whichever path wrote it
// (tests/cpp/launch_writer_test.cc). It accepts the kinds most launches
// carry: None, strided openreg tensors that are not quantized, contiguous
// CPU tensors of at most kMaxInlineHostBytes, bools, ints, doubles,
// strings, int lists and lists of such tensors. For anything else
// AddArgument returns false and writes nothing: the caller then builds the
// proto::LaunchOp, which knows every kind (and every error message).
//
// Write the fields in field-number order: Begin, the arguments, the
// outputs, then the settings. The bytes stay valid until the next Begin.
#ifndef OPENREG_OP_CODEC_LAUNCH_WRITER_H_
#define OPENREG_OP_CODEC_LAUNCH_WRITER_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "google/protobuf/wire_format_lite.h"
#include "protos/commands.pb.h"

namespace openreg::op_codec {

class LaunchWriter {
 public:
  LaunchWriter() = default;
  // Not copyable: the cursor points into the writer's own buffer.
  LaunchWriter(const LaunchWriter&) = delete;
  LaunchWriter& operator=(const LaunchWriter&) = delete;

  // Starts a LaunchOp of `name` and `overload`, forgetting the last one.
  void Begin(std::string_view name, std::string_view overload);

  // Appends one argument; false (nothing written) for a kind not listed
  // above.
  bool AddArgument(const c10::IValue& value);

  // Appends an output, an allocated openreg tensor; false (nothing
  // written) for a quantized one.
  bool AddOutput(const at::Tensor& tensor);

  // Sets the launch's KernelSettings field (only when not the defaults).
  void SetSettings(const proto::KernelSettings& settings);

  std::string_view bytes() const {
    return {buffer_.data(), static_cast<size_t>(cursor_ - buffer_.data())};
  }

 private:
  // Every write makes room first and then stores through cursor_, with no
  // per-byte bounds check: the buffer only grows, and a launch's bytes are
  // reused from the last one's storage.
  void Reserve(size_t bytes) {
    if (static_cast<size_t>(end_ - cursor_) < bytes) Grow(bytes);
  }
  void Grow(size_t bytes);
  size_t Offset() const { return cursor_ - buffer_.data(); }
  void PutVarint(uint64_t value) {
    Reserve(kMaxVarintBytes);
    cursor_ = WriteVarint(cursor_, value);
  }
  void PutTag(int field, int wire_type) {
    PutVarint((static_cast<uint32_t>(field) << 3) |
              static_cast<uint32_t>(wire_type));
  }
  void PutBytes(const void* data, size_t size);
  void PutString(int field, std::string_view bytes);
  // A length-delimited field whose length EndMessage writes (at the offset
  // BeginMessage returns). Inline: a launch has a dozen of them.
  size_t BeginMessage(int field) {
    PutTag(
        field,
        google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
    // One byte for the length: most nested messages are shorter than 128
    // bytes. EndMessage makes room when one is not.
    Reserve(1);
    *cursor_++ = 0;
    return Offset() - 1;
  }
  void EndMessage(size_t length_at) {
    const size_t length = Offset() - length_at - 1;
    if (length < 0x80) {
      buffer_[length_at] = static_cast<char>(length);
      return;
    }
    WidenLength(length_at, length);
  }
  // EndMessage for a message of 128 bytes or more: its length takes more
  // than the byte BeginMessage kept, so the message moves up.
  void WidenLength(size_t length_at, size_t length);
  template <typename Ints>
  void PutPackedInts(int field, const Ints& values);
  void PutTensorRef(const at::Tensor& tensor);

  // Unchecked writes at `out`, where the caller made room; each returns the
  // end of what it wrote. They go through a local pointer, not cursor_: a
  // store through a char* may alias any member, so the compiler reloads
  // cursor_ after every byte (a fifth of a TensorRef's instructions).
  static char* WriteVarint(char* out, uint64_t value) {
    while (value >= 0x80) {
      *out++ = static_cast<char>(value | 0x80);
      value >>= 7;
    }
    *out++ = static_cast<char>(value);
    return out;
  }
  static char* WriteTag(char* out, int field, int wire_type) {
    return WriteVarint(out, (static_cast<uint32_t>(field) << 3) |
                                static_cast<uint32_t>(wire_type));
  }
  template <typename Ints>
  static char* WritePackedInts(char* out, int field, const Ints& values);
  // The most bytes WritePackedInts writes for `count` values: the tag, the
  // length and ten bytes per value.
  static constexpr size_t MaxPackedBytes(size_t count) {
    return 2 * kMaxVarintBytes + count * kMaxVarintBytes;
  }
  static constexpr size_t kMaxVarintBytes = 10;
  bool PutHostTensor(const at::Tensor& tensor);
  // One Argument's oneof value, without the Argument's own tag.
  bool PutValue(const c10::IValue& value);
  bool PutTensorValue(const at::Tensor& tensor);

  std::string buffer_;  // storage; the launch is [data(), cursor_)
  char* cursor_ = nullptr;
  char* end_ = nullptr;
};

}  // namespace openreg::op_codec

#endif  // OPENREG_OP_CODEC_LAUNCH_WRITER_H_
