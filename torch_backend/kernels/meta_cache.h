// Memoizes Meta-kernel results by argument metadata.
//
// An entry is stored only after the real kernel accepted a call with that
// key (the first launch of each signature is checked, remote_fallback.cc):
// a hit means every check the kernel makes on metadata has passed, and
// replays the warnings that kernel raised.
//
// In torch 2.13 most Meta kernels are Python functions
// (torch/_meta_registrations.py shadows the C++ ones), so inferring one op's
// output shapes costs 100-400 µs. Output metadata depends only on the
// arguments' metadata and values and on the settings Meta kernels read (the
// default dtype, deterministic mode), all of which are in the key, so a hit
// replaces the call; training loops repeat the same shapes and hit almost
// always.
#ifndef OPENREG_TORCH_BACKEND_KERNELS_META_CACHE_H_
#define OPENREG_TORCH_BACKEND_KERNELS_META_CACHE_H_

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace openreg::torch_backend {

struct MetaResult {
  // The Meta kernel could not run for these arguments (data-dependent
  // shape, unsupported input): the op must run synchronously.
  bool unavailable = false;
  // Meta tensors carrying the outputs' sizes, strides, dtype and offset.
  std::vector<c10::IValue> outputs;
  // What the kernel warned at its checked launch, raised again at each hit
  // (as CPU warns at every call).
  std::vector<c10::Warning> warnings;
};

// What the key of an op's calls depends on, worked out once per schema:
// the fallback keeps it in its per-op plan, so a call looks nothing up.
struct MetaKeyTraits {
  // Floating-point scalars are keyed by sign and exponent only (the
  // optimizer arithmetic whose kernels check nothing else; meta_cache.cc).
  bool scalars_by_class = false;
  // An argument is a tensor list: the key records aliasing inside lists.
  bool has_tensor_list = false;
};
MetaKeyTraits MetaKeyTraitsOf(const c10::OperatorHandle& op);

// Writes the cache key of a call into `key` (reusing its capacity: the
// per-op path allocates nothing on a hit); false when an argument kind is
// not understood (such calls are not cached). `traits` are
// MetaKeyTraitsOf(op). `keep_storage` (view ops) makes storage offsets and
// sizes part of the key.
bool BuildMetaCacheKey(const c10::OperatorHandle& op,
                       const MetaKeyTraits& traits,
                       c10::ArrayRef<c10::IValue> arguments, bool keep_storage,
                       std::string* key);

// Thread-safe lookup/insert; bounded (cleared when it grows too large, as
// happens with ever-changing shapes). Results are shared, never copied.
std::shared_ptr<const MetaResult> FindMetaResult(absl::string_view key);
void StoreMetaResult(std::string key, std::shared_ptr<const MetaResult> result);

}  // namespace openreg::torch_backend

#endif  // OPENREG_TORCH_BACKEND_KERNELS_META_CACHE_H_
