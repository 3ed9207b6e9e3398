#include "device_daemon/server/control_listener.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/base/log.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/server_posix.h"

namespace openreg::daemon {
namespace {

// The uid behind a call on a connection handed over by fd: gRPC names such
// a connection's peer "fd:N". Only used for the refusal's wording; the
// decision was taken at accept time.
bool PeerUidOf(const std::string& peer, uid_t* uid) {
  absl::string_view text = peer;
  int fd = -1;
  if (!absl::ConsumePrefix(&text, "fd:") || !absl::SimpleAtoi(text, &fd)) {
    return false;
  }
  absl::StatusOr<PeerCredentials> credentials = GetPeerCredentials(fd);
  if (!credentials.ok()) return false;
  *uid = credentials->uid;
  return true;
}

// Answers every method of every service PERMISSION_DENIED.
class RefusalService : public grpc::CallbackGenericService {
 public:
  RefusalService(uid_t daemon_uid, std::string socket_path)
      : daemon_uid_(daemon_uid), socket_path_(std::move(socket_path)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    class Refusal : public grpc::ServerGenericBidiReactor {
     public:
      explicit Refusal(const std::string& message) {
        Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, message));
      }
      void OnDone() override { delete this; }
    };
    uid_t peer_uid = 0;
    const std::string message =
        PeerUidOf(context->peer(), &peer_uid)
            ? ForeignUidMessage(peer_uid, daemon_uid_, socket_path_)
            : absl::StrCat("only uid ", daemon_uid_,
                           " may use the openreg-daemon on ", socket_path_);
    return new Refusal(message);
  }

 private:
  const uid_t daemon_uid_;
  const std::string socket_path_;
};

}  // namespace

std::string ForeignUidMessage(uid_t peer_uid, uid_t daemon_uid,
                              const std::string& socket_path) {
  return absl::StrCat(
      "uid ", peer_uid, " may not use the openreg-daemon of uid ", daemon_uid,
      " on ", socket_path,
      ": each user runs their own daemon; start yours with `openreg-daemon "
      "--socket=PATH` in a folder of your own (or let the first device use "
      "start one at the default path)");
}

ControlListener::ControlListener(const SocketDirectory* directory,
                                 std::string socket_path, grpc::Server* control)
    : control_(control),
      daemon_uid_(getuid()),
      listener_(directory, std::move(socket_path), "control socket") {}

ControlListener::~ControlListener() { Stop(); }

absl::Status ControlListener::Start() {
  refusal_service_ =
      std::make_unique<RefusalService>(daemon_uid_, listener_.socket_path());
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(refusal_service_.get());
  refusing_ = builder.BuildAndStart();
  if (refusing_ == nullptr) {
    return absl::InternalError("cannot start the refusing gRPC server");
  }
  absl::Status opened = listener_.Open();
  if (!opened.ok()) return opened;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void ControlListener::Stop() {
  if (thread_.joinable()) {
    listener_.Wake();
    thread_.join();
  }
  listener_.Close();
  if (refusing_ != nullptr) {
    refusing_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(1));
    refusing_->Wait();
    refusing_.reset();
  }
}

void ControlListener::Loop() {
  while (true) {
    pollfd fds[2] = {{listener_.wake_fd(), POLLIN, 0},
                     {listener_.listen_fd(), POLLIN, 0}};
    const int ready = poll(fds, 2, /*timeout_ms=*/-1);
    if (ready < 0 && errno != EINTR) {
      Log(LogLevel::kError, "control socket poll: ", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;  // Stop()
    if (fds[1].revents & POLLIN) AcceptAll();
  }
}

void ControlListener::AcceptAll() {
  while (true) {
    const int fd = listener_.Accept();
    if (fd < 0) return;
    absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(fd);
    if (!peer.ok()) {
      close(fd);
      continue;
    }
    if (peer->uid == daemon_uid_) {
      grpc::AddInsecureChannelFromFd(control_, fd);
    } else {
      Log(LogLevel::kInfo, "refusing control calls of uid ", peer->uid,
          " (pid ", peer->pid, ")");
      grpc::AddInsecureChannelFromFd(refusing_.get(), fd);
    }
  }
}

}  // namespace openreg::daemon
