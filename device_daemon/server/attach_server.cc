#include "device_daemon/server/attach_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/session_layout.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/base/log.h"
#include "device_daemon/base/process_info.h"
#include "device_daemon/server/control_listener.h"
#include "protos/control.pb.h"

namespace openreg::daemon {
namespace {

// A client must send its whole hello this soon after connecting.
constexpr absl::Duration kHelloTimeout = absl::Seconds(5);
// Connections still owing their hello; beyond this the oldest is dropped,
// so that a flood of idle connections costs bounded memory and fds while
// prompt clients still get through.
constexpr size_t kMaxPendingHellos = 64;
// Connections accepted per wake-up, so that a flood cannot starve the
// connections already there.
constexpr int kMaxAcceptsPerWake = 64;

template <size_t N>
void CopyText(char (&field)[N], const std::string& text) {
  const size_t length = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), length);
  field[length] = '\0';
}

AttachWelcome BaseWelcome(uint32_t device_count) {
  AttachWelcome welcome;
  std::memset(&welcome, 0, sizeof(welcome));
  welcome.magic = kAttachMagic;
  welcome.protocol_version = kProtocolVersion;
  welcome.device_count = device_count;
  return welcome;
}

}  // namespace

AttachServer::AttachServer(SessionRegistry* registry,
                           const SocketDirectory* directory,
                           std::string socket_path, uint32_t device_count)
    : registry_(registry),
      device_count_(device_count),
      daemon_uid_(getuid()),
      listener_(directory, std::move(socket_path), "attach socket") {}

AttachServer::~AttachServer() { Stop(); }

absl::Status AttachServer::Start() {
  absl::Status opened = listener_.Open();
  if (!opened.ok()) return opened;
  drop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (drop_fd_ < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void AttachServer::Stop() {
  if (thread_.joinable()) {
    listener_.Wake();
    thread_.join();
  }
  for (const auto& [fd, connection] : connections_) close(fd);
  connections_.clear();
  listener_.Close();
  if (drop_fd_ >= 0) {
    close(drop_fd_);
    drop_fd_ = -1;
  }
}

void AttachServer::DropSession(uint64_t session_id) {
  {
    absl::MutexLock lock(&drop_mutex_);
    drop_requests_.push_back(session_id);
  }
  const uint64_t one = 1;
  ssize_t ignored = write(drop_fd_, &one, sizeof(one));
  (void)ignored;
}

void AttachServer::DropRequestedSessions() {
  uint64_t count = 0;
  ssize_t ignored = read(drop_fd_, &count, sizeof(count));
  (void)ignored;
  std::vector<uint64_t> requests;
  {
    absl::MutexLock lock(&drop_mutex_);
    requests.swap(drop_requests_);
  }
  for (uint64_t session_id : requests) {
    for (const auto& [fd, connection] : connections_) {
      if (connection.session_id == session_id) {
        Disconnect(fd, "dropped by an injected disconnect fault");
        break;
      }
    }
  }
}

void AttachServer::Loop() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({listener_.wake_fd(), POLLIN, 0});
    fds.push_back({listener_.listen_fd(), POLLIN, 0});
    fds.push_back({drop_fd_, POLLIN, 0});
    // Wake up in time for the earliest hello deadline.
    absl::Duration wait = absl::Seconds(1);
    const absl::Time before = absl::Now();
    for (const auto& [fd, connection] : connections_) {
      fds.push_back({fd, POLLIN | POLLRDHUP, 0});
      if (connection.session_id == 0) {
        wait = std::min(wait, connection.accepted + kHelloTimeout - before);
      }
    }
    const int timeout_ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1))), 0,
        1000));
    const int ready = poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      Log(LogLevel::kError, "attach socket poll: ", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;  // Stop()
    if (fds[2].revents & POLLIN) DropRequestedSessions();
    for (size_t i = 3; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      auto connection = connections_.find(fd);
      if (connection == connections_.end()) continue;
      const short events = fds[i].revents;
      if (connection->second.session_id == 0) {
        if (events & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)) ReadHello(fd);
        continue;
      }
      if (events & (POLLHUP | POLLERR | POLLRDHUP)) {
        Disconnect(fd, "client disconnected");
      } else if (events & POLLIN) {
        // Nothing is expected after the welcome; drain and ignore it (and
        // close any fd passed with it), but notice an orderly shutdown.
        char scratch[256];
        if (!ReceiveAvailable(fd, scratch, sizeof(scratch)).ok()) {
          Disconnect(fd, "client disconnected");
        }
      }
    }
    // After the existing connections, so that their hellos are read before
    // a flood of new ones can push them out.
    if (fds[1].revents & POLLIN) Accept();
    DropExpiredHellos(absl::Now());
  }
}

void AttachServer::Accept() {
  for (int accepted = 0; accepted < kMaxAcceptsPerWake; ++accepted) {
    const int fd = listener_.Accept();
    if (fd < 0) return;
    Connection& connection = connections_[fd];
    connection.accepted = absl::Now();
    size_t pending = 0;
    auto oldest = connections_.end();
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      if (it->second.session_id != 0) continue;
      ++pending;
      if (oldest == connections_.end() ||
          it->second.accepted < oldest->second.accepted) {
        oldest = it;
      }
    }
    if (pending > kMaxPendingHellos) {
      Log(LogLevel::kDebug, "attach socket: more than ", kMaxPendingHellos,
          " connections owe a hello; dropping the oldest");
      Disconnect(oldest->first, "too many connections waiting for a hello");
    }
  }
}

void AttachServer::DropExpiredHellos(absl::Time now) {
  std::vector<int> expired;
  for (const auto& [fd, connection] : connections_) {
    if (connection.session_id == 0 &&
        now - connection.accepted >= kHelloTimeout) {
      expired.push_back(fd);
    }
  }
  for (int fd : expired) {
    Log(LogLevel::kDebug, "attach socket: no complete hello within ",
        absl::FormatDuration(kHelloTimeout), "; closing the connection");
    Disconnect(fd, "no hello");
  }
}

void AttachServer::SendRefusal(int fd, int32_t error_code,
                               const std::string& message) {
  AttachWelcome welcome = BaseWelcome(device_count_);
  welcome.error_code = error_code;
  CopyText(welcome.message, message);
  SendMessage(fd, &welcome, sizeof(welcome)).IgnoreError();
  Log(LogLevel::kInfo, "refused attach: ", message);
}

void AttachServer::ReadHello(int fd) {
  Connection& connection = connections_[fd];
  if (!connection.peer_checked) {
    absl::StatusOr<PeerCredentials> peer = GetPeerCredentials(fd);
    if (!peer.ok()) {
      Disconnect(fd, "no peer credentials");
      return;
    }
    if (peer->uid != daemon_uid_) {
      SendRefusal(
          fd, proto::PERMISSION_DENIED,
          ForeignUidMessage(peer->uid, daemon_uid_, listener_.socket_path()));
      Disconnect(fd, "another uid");
      return;
    }
    connection.peer = *peer;
    connection.peer_checked = true;
  }
  char* const hello = reinterpret_cast<char*>(&connection.hello);
  absl::StatusOr<size_t> got =
      ReceiveAvailable(fd, hello + connection.hello_bytes,
                       sizeof(AttachHello) - connection.hello_bytes);
  if (!got.ok()) {
    Disconnect(fd, "hung up before its hello");
    return;
  }
  connection.hello_bytes += *got;
  if (connection.hello_bytes == sizeof(AttachHello)) Attach(fd);
}

void AttachServer::Attach(int fd) {
  // From here on the connection either becomes a session or is closed.
  auto pending = connections_.find(fd);
  AttachHello hello = pending->second.hello;
  const PeerCredentials peer = pending->second.peer;
  connections_.erase(pending);
  if (hello.magic != kAttachMagic) {
    SendRefusal(fd, proto::INVALID_VALUE,
                "not an openreg attach request (bad magic)");
    close(fd);
    return;
  }
  if (hello.protocol_version != kProtocolVersion) {
    SendRefusal(fd, proto::VERSION_MISMATCH,
                absl::StrCat("client protocol ", hello.protocol_version,
                             ", daemon protocol ", kProtocolVersion,
                             ": install matching torch_openreg and "
                             "openreg-daemon"));
    close(fd);
    return;
  }
  hello.client_name[sizeof(hello.client_name) - 1] = '\0';
  const std::string client_name(hello.client_name);
  absl::StatusOr<std::shared_ptr<Session>> session =
      registry_->Create(peer, client_name);
  if (!session.ok()) {
    SendRefusal(
        fd, proto::RESOURCE_EXHAUSTED,
        absl::StrCat("cannot create a session: ", session.status().message()));
    close(fd);
    return;
  }
  AttachWelcome welcome = BaseWelcome(device_count_);
  welcome.session_id = (*session)->id();
  welcome.token = (*session)->token();
  welcome.segment_bytes = (*session)->segment().size();
  const SharedMemory& doorbells = (*session)->devices().doorbell_page();
  welcome.doorbell_bytes = doorbells.size();
  std::vector<int> fds = {(*session)->segment().fd(), doorbells.fd()};
  const std::vector<int>& ring_fds = (*session)->ring_fds();
  fds.insert(fds.end(), ring_fds.begin(), ring_fds.end());
  const absl::Status sent =
      SendMessage(fd, &welcome, sizeof(welcome), fds.data(), fds.size());
  if (!sent.ok()) {
    registry_->Remove((*session)->id(), "welcome could not be sent")
        .IgnoreError();
    close(fd);
    return;
  }
  connections_[fd] = Connection{(*session)->id(), absl::Now()};
  Log(LogLevel::kInfo, "attached session ", (*session)->id(), " (pid ",
      peer.pid, ", uid ", peer.uid, ", '", client_name,
      "'): ", ProcessCommandLine(peer.pid));
}

void AttachServer::Disconnect(int fd, const char* reason) {
  auto connection = connections_.find(fd);
  if (connection != connections_.end()) {
    if (connection->second.session_id != 0) {
      // NotFound when the client detached through the control plane first.
      registry_->Remove(connection->second.session_id, reason).IgnoreError();
    }
    connections_.erase(connection);
  }
  close(fd);
}

}  // namespace openreg::daemon
