// The c10 error classes that keep their identity across the process
// boundary, each listed once with the proto::ErrorCode it travels as. A
// kernel in the daemon that throws c10::IndexError makes the client throw
// c10::IndexError (Python's IndexError) at the op's call, as on CPU.
//
// The one error table (data_plane/error_codes.h) says which Python
// exception each code stands for; it is libtorch-free, so the c10 class of
// each of those exceptions is written here, once, and used in both
// directions: the daemon's op runner turns a kernel's c10::Error into its
// code (CodeOfKernelError), the torch backend turns a code back into the
// c10 exception of its Python class (ThrowC10Error). Promises:
// ThrowC10Error(CodeOfKernelError(e)) throws e's class for every class
// listed, and the codes a kernel's errors travel as come back unchanged
// (tests/cpp/error_classes_test.cc).
#ifndef OPENREG_OP_CODEC_ERROR_CLASSES_H_
#define OPENREG_OP_CODEC_ERROR_CLASSES_H_

#include <c10/util/Exception.h>

#include <string>

#include "protos/errors.pb.h"

namespace openreg::op_codec {

// The code a kernel's `error` travels as: its class's (IndexError ->
// KERNEL_INDEX_ERROR, OutOfMemoryError -> OUT_OF_MEMORY, ...), or
// KERNEL_FAILURE (Python's RuntimeError) for any other c10::Error.
proto::ErrorCode CodeOfKernelError(const c10::Error& error);

// Throws the c10 exception of the Python class the error table gives
// `code`, with `message` as its message (what_without_backtrace). Codes
// whose class is RuntimeError (and OK, which is no error) throw a plain
// c10::Error.
[[noreturn]] void ThrowC10Error(proto::ErrorCode code,
                                const std::string& message);

}  // namespace openreg::op_codec

#endif  // OPENREG_OP_CODEC_ERROR_CLASSES_H_
