// The attach socket is the daemon's first contact with a client: any local
// process of the daemon's uid can connect and send anything. The daemon's
// AttachServer reassembles the fixed-size AttachHello from however many
// pieces it arrives in, checks magic and protocol version, terminates the
// client name and creates a session. Fuzzed over a real socket against an
// AttachServer in this process, since the daemon has no parsing function
// separate from its connection handling (see docs/SECURITY.md).
//
// Whatever is sent — any bytes, split anywhere, with or without file
// descriptors attached — the daemon must answer a complete hello with the
// refusal or welcome its header calls for, never attach a hello with a bad
// magic or version, keep the client name within its 64 bytes, and once the
// client hangs up hold no session, no connection and no passed fd.
//
// Input: [flags][split][hello bytes...]. flags bit 0 writes a valid magic
// and protocol version over the first 8 hello bytes (so that mutations get
// past those checks without guessing 32-bit values); bits 1 and 2 attach
// one, or three, file descriptors to the first piece. `split` cuts the
// hello bytes into up to four pieces (see below).
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "data_plane/attach_protocol.h"
#include "data_plane/session_layout.h"
#include "data_plane/unix_socket.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/server/attach_server.h"
#include "device_daemon/server/socket_directory.h"
#include "device_daemon/sessions/session_registry.h"
#include "protos/errors.pb.h"
#include "tests/fuzz/fuzz_target.h"

namespace openreg::fuzz {
namespace {

// How long the daemon may take to answer or to clean up after a hang-up.
constexpr absl::Duration kPatience = absl::Seconds(20);

struct Daemon {
  std::string directory_path;
  std::string attach_path;
  std::unique_ptr<daemon::Devices> devices;
  std::unique_ptr<daemon::SessionRegistry> registry;
  std::unique_ptr<daemon::SocketDirectory> directory;
  std::unique_ptr<daemon::AttachServer> server;
};

Daemon& TheDaemon() {
  static Daemon* d = [] {
    auto* created = new Daemon;
    char pattern[] = "/tmp/openreg-fuzz-XXXXXX";  // sockets: short paths
    OPENREG_FUZZ_CHECK(mkdtemp(pattern) != nullptr, "mkdtemp");
    created->directory_path = pattern;
    const std::string control = created->directory_path + "/daemon.sock";
    created->attach_path = AttachSocketPath(control);
    created->devices = *daemon::Devices::Create(1, 1 << 20);
    // No executor: sessions without stream threads (what is fuzzed here is
    // the attach path, not the data plane).
    SessionLimits limits;
    limits.max_streams = 2;
    limits.max_events = 4;
    limits.ring_bytes = 4096;
    limits.reply_bytes = 4096;
    limits.staging_bytes = 4096;
    created->registry = std::make_unique<daemon::SessionRegistry>(
        created->devices.get(), /*executor=*/nullptr, limits);
    absl::StatusOr<daemon::SocketDirectory> directory =
        daemon::SocketDirectory::Open(control);
    OPENREG_FUZZ_CHECK(directory.ok(), directory.status().ToString());
    created->directory =
        std::make_unique<daemon::SocketDirectory>(*std::move(directory));
    created->server = std::make_unique<daemon::AttachServer>(
        created->registry.get(), created->directory.get(), created->attach_path,
        /*device_count=*/1);
    const absl::Status started = created->server->Start();
    OPENREG_FUZZ_CHECK(started.ok(), started.ToString());
    // The process exits without stopping the server; leave no folder.
    atexit([] {
      Daemon& d = TheDaemon();
      d.server->Stop();
      rmdir(d.directory_path.c_str());
    });
    return created;
  }();
  return *d;
}

int OpenFdCount() {
  DIR* dir = opendir("/proc/self/fd");
  int count = 0;
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;
}

// Sends `bytes` with `fds` attached (SendMessage passes at most one).
bool SendPiece(int socket, const std::string& bytes,
               const std::vector<int>& fds) {
  iovec io{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 3)] = {};
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  const ssize_t sent = sendmsg(socket, &message, MSG_NOSIGNAL);
  // The daemon may already have refused and closed: not a finding.
  return sent == static_cast<ssize_t>(bytes.size());
}

// Waits for the daemon to have dropped the connection and its session and
// to have closed every fd it was passed.
void ExpectCleanedUp(const Daemon& d, int fds_before) {
  const absl::Time deadline = absl::Now() + kPatience;
  while (d.registry->attached_count() != 0 || OpenFdCount() > fds_before) {
    OPENREG_FUZZ_CHECK(
        absl::Now() < deadline,
        absl::StrCat("after the client hung up the daemon still holds ",
                     d.registry->attached_count(), " sessions and ",
                     OpenFdCount() - fds_before, " more fds"));
    absl::SleepFor(absl::Microseconds(200));
  }
}

std::string Input(uint8_t flags, uint8_t split, const AttachHello& hello,
                  size_t size = sizeof(AttachHello)) {
  std::string input;
  input += static_cast<char>(flags);
  input += static_cast<char>(split);
  input.append(reinterpret_cast<const char*>(&hello),
               std::min(size, sizeof(hello)));
  if (size > sizeof(hello)) input.append(size - sizeof(hello), 'x');
  return input;
}

}  // namespace

std::vector<std::string> Seeds() {
  AttachHello hello{};
  hello.magic = kAttachMagic;
  hello.protocol_version = kProtocolVersion;
  std::strcpy(hello.client_name, "pytorch (pid 4242)");
  AttachHello unterminated = hello;
  std::memset(unterminated.client_name, 'n', sizeof(unterminated.client_name));
  AttachHello old = hello;
  old.protocol_version = kProtocolVersion - 1;
  AttachHello foreign = hello;
  foreign.magic = 0x504f5354;  // "POST"
  return {
      Input(0, 0, hello),
      Input(0, 0x1b, hello),
      Input(0, 0xff, hello),
      Input(2, 0, hello),
      Input(4, 0x55, hello),
      Input(0, 0, unterminated),
      Input(1, 0, unterminated),
      Input(0, 0, old),
      Input(0, 0, foreign),
      Input(0, 0, hello, 7),
      Input(0, 0, hello, 40),
      Input(6, 0, hello, 3),
      Input(0, 0, hello, sizeof(hello) + 9),
      std::string("\x00\x00GET / HTTP/1.1\r\n\r\n", 20),
  };
}

std::vector<std::string> Dictionary() {
  const uint32_t magic = kAttachMagic;
  const uint32_t version = kProtocolVersion;
  return {std::string(reinterpret_cast<const char*>(&magic), 4),
          std::string(reinterpret_cast<const char*>(&version), 4),
          std::string(1, '\0')};
}

}  // namespace openreg::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace openreg;        // NOLINT(build/namespaces)
  using namespace openreg::fuzz;  // NOLINT(build/namespaces)
  Daemon& d = TheDaemon();
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const uint8_t split = data[1];
  std::string hello_bytes(reinterpret_cast<const char*>(data) + 2, size - 2);
  if ((flags & 1) && hello_bytes.size() >= 8) {
    const uint32_t header[2] = {kAttachMagic, kProtocolVersion};
    std::memcpy(hello_bytes.data(), header, sizeof(header));
  }
  const int fds_before = OpenFdCount();

  absl::StatusOr<int> connected = ConnectUnix(d.attach_path);
  OPENREG_FUZZ_CHECK(connected.ok(), connected.status().ToString());
  const int socket = *connected;
  std::vector<int> passed;
  if (flags & 6) {
    for (int i = (flags & 4) ? 3 : 1; i > 0; --i) {
      passed.push_back(open("/dev/null", O_RDONLY | O_CLOEXEC));
    }
  }
  // Up to three cuts, one in each third of the hello: 2-bit field i of
  // `split` places cut i (3 = no cut there), so 0xff sends one piece.
  std::vector<size_t> cuts = {0};
  for (int i = 0; i < 3; ++i) {
    const size_t field = (split >> (2 * i)) & 3;
    const size_t cut = hello_bytes.size() * (4 * i + 1 + field) / 12;
    if (field != 3 && cut > cuts.back() && cut < hello_bytes.size()) {
      cuts.push_back(cut);
    }
  }
  cuts.push_back(hello_bytes.size());
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (!SendPiece(socket, hello_bytes.substr(cuts[i], cuts[i + 1] - cuts[i]),
                   i == 0 ? passed : std::vector<int>{})) {
      break;
    }
  }
  for (int fd : passed) close(fd);  // the daemon's copies are its to close

  if (hello_bytes.size() >= sizeof(AttachHello)) {
    // A complete hello always gets an answer.
    AttachHello hello;
    std::memcpy(&hello, hello_bytes.data(), sizeof(hello));
    AttachWelcome welcome{};
    int segment_fd = -1;
    const absl::Status answered = ReceiveMessage(
        socket, &welcome, sizeof(welcome), kPatience, &segment_fd);
    OPENREG_FUZZ_CHECK(answered.ok(),
                       "no answer to a complete hello: " + answered.ToString());
    OPENREG_FUZZ_CHECK(welcome.magic == kAttachMagic, "welcome magic");
    OPENREG_FUZZ_CHECK(
        std::memchr(welcome.message, '\0', sizeof(welcome.message)) != nullptr,
        "the welcome's message is terminated");
    int32_t expected = 0;
    if (hello.magic != kAttachMagic) {
      expected = proto::INVALID_VALUE;
    } else if (hello.protocol_version != kProtocolVersion) {
      expected = proto::VERSION_MISMATCH;
    }
    OPENREG_FUZZ_CHECK(
        welcome.error_code == expected,
        absl::StrCat("answered ", welcome.error_code, " instead of ", expected,
                     ": ", welcome.message));
    OPENREG_FUZZ_CHECK((segment_fd >= 0) == (expected == 0),
                       "a segment fd exactly with a welcome");
    if (expected == 0) {
      const std::vector<std::shared_ptr<daemon::Session>> sessions =
          d.registry->Snapshot();
      OPENREG_FUZZ_CHECK(sessions.size() == 1, "one session per welcome");
      const std::string sent_name(
          hello.client_name,
          strnlen(hello.client_name, sizeof(hello.client_name) - 1));
      OPENREG_FUZZ_CHECK(sessions[0]->client_name() == sent_name,
                         "the client name is the hello's, cut at 63 bytes");
      OPENREG_FUZZ_CHECK(sessions[0]->id() == welcome.session_id,
                         "the welcome names the session");
    }
    if (segment_fd >= 0) close(segment_fd);
  }
  close(socket);
  ExpectCleanedUp(d, fds_before);
  return 0;
}
