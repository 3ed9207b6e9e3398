#include "torch_backend/kernels/op_routing.h"

#include <optional>
#include <string>

namespace openreg::torch_backend {

int RouteAtenOps(c10::DispatchKey key,
                 const std::function<bool(const c10::OperatorHandle&)>& selects,
                 const std::function<torch::CppFunction()>& make_kernel) {
  // Leaked: the registrations must outlive every op call, up to exit.
  auto* library =
      new torch::Library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
  int count = 0;
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    std::optional<c10::OperatorHandle> op = dispatcher.findSchema(name);
    if (!op.has_value() || op->hasKernelForDispatchKey(key) || !selects(*op)) {
      continue;
    }
    std::string qualified = name.name.substr(6);  // without "aten::"
    if (!name.overload_name.empty()) qualified += "." + name.overload_name;
    library->impl(qualified.c_str(), make_kernel());
    ++count;
  }
  return count;
}

}  // namespace openreg::torch_backend
