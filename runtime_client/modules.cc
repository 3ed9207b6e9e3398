// Compiled modules (openreg/modules.h): the library is opened here and
// named to the daemon by fd number (it opens /proc/<pid>/fd/<fd>, so the
// file it checks is the file the client named); launches are ring
// commands like any op.
#include "openreg/modules.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "data_plane/unique_fd.h"
#include "runtime_client/client.h"
#include "runtime_client/session.h"
#include "runtime_client/status_util.h"
#include "runtime_client/thread_state.h"

namespace openreg {

using client::MakeError;
using client::NullArgumentError;
using client::ReturnStatus;
using client::Session;
using client::StreamContext;
using client::WithSession;

Error LoadModule(const std::string& path, ModuleId* module) {
  if (module == nullptr) {
    return ReturnStatus(NullArgumentError("LoadModule", "module"));
  }
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      return MakeError(Error::kInvalidValue,
                       absl::StrCat("openreg: cannot open module ", path, ": ",
                                    std::strerror(errno)));
    }
    proto::LoadModuleRequest request;
    session.FillRef(request.mutable_session());
    request.set_client_fd(fd.get());
    request.set_name(path);
    proto::LoadModuleReply reply;
    absl::Status loaded = session.Call(
        "LoadModule", &proto::DeviceDaemon::Stub::LoadModule, request, &reply);
    if (!loaded.ok()) return loaded;
    if (reply.module() == 0) {
      return MakeError(Error::kInternal,
                       "openreg: the daemon returned module 0");
    }
    *module = reply.module();
    return absl::OkStatus();
  }));
}

Error UnloadModule(ModuleId module) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    proto::UnloadModuleRequest request;
    session.FillRef(request.mutable_session());
    request.set_module(module);
    proto::UnloadModuleReply reply;
    return session.Call("UnloadModule",
                        &proto::DeviceDaemon::Stub::UnloadModule, request,
                        &reply);
  }));
}

Error LaunchModuleKernel(const proto::LaunchModuleKernel& launch,
                         StreamId stream) {
  return ReturnStatus(WithSession([&](Session& session) -> absl::Status {
    absl::StatusOr<StreamContext*> context = session.FindStream(stream);
    if (!context.ok()) return context.status();
    proto::Command command;
    *command.mutable_launch_module() = launch;
    return session.SubmitCommand(**context, &command).status();
  }));
}

}  // namespace openreg
