#include "torch_backend/kernels/structured_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

#include "torch_backend/kernels/remote_fallback.h"

namespace openreg::torch_backend {
namespace {

// Ops whose Meta kernel (torch/_meta_registrations.py) disagrees with the
// C++ shape logic: they keep ATen's host-side shape computation. cat: the
// legacy skipping of 1-D empty inputs gives [0] on CPU but [2, 0] in Meta.
bool KeepsHostShapeLogic(const c10::OperatorName& name) {
  return name.name == "aten::cat";
}

}  // namespace

int RouteStructuredOpsToDaemon() {
  // Leaked: the registrations must outlive every op call, up to exit.
  static auto* library =
      new torch::Library(torch::Library::IMPL, "aten",
                         c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  static int routed = [] {
    int count = 0;
    c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      std::optional<c10::OperatorHandle> op = dispatcher.findSchema(name);
      if (!op.has_value() ||
          !op->hasKernelForDispatchKey(
              c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
          !op->hasKernelForDispatchKey(c10::DispatchKey::Meta) ||
          op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
          KeepsHostShapeLogic(name)) {
        continue;
      }
      std::string qualified = name.name.substr(6);  // without "aten::"
      if (!name.overload_name.empty()) {
        qualified += "." + name.overload_name;
      }
      library->impl(
          qualified.c_str(),
          torch::CppFunction::makeFromBoxedFunction<&RemoteFallback>());
      ++count;
    }
    return count;
  }();
  return routed;
}

}  // namespace openreg::torch_backend
