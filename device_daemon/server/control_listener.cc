#include "device_daemon/server/control_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

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
    : directory_(directory),
      socket_path_(std::move(socket_path)),
      control_(control),
      daemon_uid_(getuid()) {}

ControlListener::~ControlListener() { Stop(); }

absl::Status ControlListener::Start() {
  refusal_service_ =
      std::make_unique<RefusalService>(daemon_uid_, socket_path_);
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(refusal_service_.get());
  refusing_ = builder.BuildAndStart();
  if (refusing_ == nullptr) {
    return absl::InternalError("cannot start the refusing gRPC server");
  }
  absl::StatusOr<int> listen_fd = ListenUnix(socket_path_);
  if (!listen_fd.ok()) return listen_fd.status();
  listen_fd_ = *listen_fd;
  // Accepted connections inherit O_NONBLOCK from accept4's flag; the
  // listening socket itself is non-blocking so that AcceptAll can drain it.
  const int flags = fcntl(listen_fd_, F_GETFL);
  fcntl(listen_fd_, F_SETFL, flags | O_NONBLOCK);
  // Only this user may connect; SO_PEERCRED is checked as well.
  absl::Status restricted =
      directory_->RestrictSocket(BaseName(socket_path_), 0600);
  if (!restricted.ok()) return restricted;
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void ControlListener::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    ssize_t ignored = write(wake_fd_, &one, sizeof(one));
    (void)ignored;
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    directory_->RemoveOwnSocket(BaseName(socket_path_));
  }
  if (wake_fd_ >= 0) {
    close(wake_fd_);
    wake_fd_ = -1;
  }
  if (refusing_ != nullptr) {
    refusing_->Shutdown(std::chrono::system_clock::now() +
                        std::chrono::seconds(1));
    refusing_->Wait();
    refusing_.reset();
  }
}

void ControlListener::Loop() {
  while (true) {
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
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
    // gRPC's endpoints expect non-blocking sockets.
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        Log(LogLevel::kWarning,
            "accept on control socket: ", std::strerror(errno));
        // E.g. EMFILE: back off instead of spinning on a ready socket.
        usleep(10000);
      }
      return;
    }
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
