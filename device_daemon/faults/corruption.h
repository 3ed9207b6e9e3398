// Bit-level corruption of device memory for the silent-data-corruption
// fault models: flipping, randomizing or zeroing the storage bits of one
// element (float32/16, bfloat16, integer and quantized values alike: the
// bits of their storage representation), forcing a stuck bit, and showing
// an element's value before and after for the fault log.
//
// Bits are numbered from the least significant bit of the element as it
// lies in memory on this little-endian host: float32 bit 31 is the sign,
// bits 23-30 the exponent, bits 0-22 the mantissa.
#ifndef OPENREG_DEVICE_DAEMON_FAULTS_CORRUPTION_H_
#define OPENREG_DEVICE_DAEMON_FAULTS_CORRUPTION_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "protos/commands.pb.h"
#include "protos/faults.pb.h"

namespace openreg::daemon {

// Applies `corruption` to the `width_bytes`-byte element at `element`,
// drawing positions and values from `rng`. Returns the bit positions it
// targeted (for "zero" and "random_value": every bit of the element).
// Explicit bit positions beyond the element are skipped.
std::vector<uint32_t> CorruptElement(char* element, int width_bytes,
                                     const proto::Corruption& corruption,
                                     std::mt19937_64& rng);

// Forces bit `bit` of the element to `value`; false when the bit lies
// beyond the element.
bool ForceBit(char* element, int width_bytes, uint32_t bit, bool value);

// The element's value for the log: a number for float, integer, bool and
// quantized dtypes ("(re, im)" for complex), else its bytes in hex. Raw
// memory (dtype < 0) is shown as hex.
std::string FormatElement(const char* element, int width_bytes, int32_t dtype);

// The offset, in elements from the tensor's address, of the element with
// flat logical index `index`; nullopt when out of range.
std::optional<int64_t> ElementOffset(const proto::TensorRef& tensor,
                                     int64_t index);

// Number of elements of `tensor`.
int64_t ElementCount(const proto::TensorRef& tensor);

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_FAULTS_CORRUPTION_H_
