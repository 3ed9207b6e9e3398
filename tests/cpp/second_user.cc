#include "tests/cpp/second_user.h"

#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace openreg {
namespace {

constexpr char kPrefix[] = "ortest";
constexpr char kUseradd[] = "/usr/sbin/useradd";
constexpr char kUserdel[] = "/usr/sbin/userdel";

// Runs argv (no shell); returns the exit code and, in *output, its
// stdout and stderr.
int Run(const std::vector<std::string>& arguments, std::string* output) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    std::vector<char*> argv;
    for (const std::string& argument : arguments) {
      argv.push_back(const_cast<char*>(argument.c_str()));
    }
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  char buffer[512];
  ssize_t got;
  while ((got = read(pipe_fds[0], buffer, sizeof(buffer))) > 0 ||
         (got < 0 && errno == EINTR)) {
    if (got > 0) output->append(buffer, static_cast<size_t>(got));
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// useradd and userdel take a lock on /etc/passwd; two tests running at
// once may meet there, so both retry for a while.
int RunWithRetries(const std::vector<std::string>& arguments,
                   std::string* output) {
  int code = -1;
  for (int attempt = 0; attempt < 50; ++attempt) {
    output->clear();
    code = Run(arguments, output);
    if (code == 0) return 0;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return code;
}

// Users "ortest<pid>" whose test process is gone (killed before its
// cleanup ran).
void RemoveAbandonedUsers() {
  std::ifstream passwd("/etc/passwd");
  std::string line;
  std::vector<std::string> abandoned;
  while (std::getline(passwd, line)) {
    absl::string_view name = absl::string_view(line).substr(0, line.find(':'));
    absl::string_view digits = name;
    int pid = 0;
    if (absl::ConsumePrefix(&digits, kPrefix) &&
        absl::SimpleAtoi(digits, &pid) && pid > 0 && kill(pid, 0) != 0 &&
        errno == ESRCH) {
      abandoned.emplace_back(name);
    }
  }
  for (const std::string& name : abandoned) {
    std::string ignored;
    Run({kUserdel, name}, &ignored);
  }
}

}  // namespace

std::string WhyNoSecondUser() {
  if (geteuid() != 0) {
    return "needs root to create a second Unix user with useradd (CI runs "
           "as root); run the test as root to check what another local user "
           "can do";
  }
  if (access(kUseradd, X_OK) != 0 || access(kUserdel, X_OK) != 0) {
    return absl::StrCat("needs ", kUseradd, " and ", kUserdel,
                        " (Debian package passwd)");
  }
  return "";
}

absl::StatusOr<std::unique_ptr<SecondUser>> SecondUser::Create() {
  const std::string why_not = WhyNoSecondUser();
  if (!why_not.empty()) return absl::FailedPreconditionError(why_not);
  RemoveAbandonedUsers();
  const std::string name = absl::StrCat(kPrefix, getpid());
  std::string output;
  if (getpwnam(name.c_str()) == nullptr) {
    const int code = RunWithRetries(
        {kUseradd, "--system", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", "--user-group", name},
        &output);
    if (code != 0) {
      return absl::InternalError(absl::StrCat(
          "useradd ", name, " failed (exit ", code, "): ", output));
    }
  }
  const passwd* entry = getpwnam(name.c_str());
  if (entry == nullptr) {
    return absl::InternalError(absl::StrCat("useradd made no user ", name));
  }
  return std::unique_ptr<SecondUser>(
      new SecondUser(name, entry->pw_uid, entry->pw_gid));
}

SecondUser::~SecondUser() {
  std::string output;
  const int code = RunWithRetries({kUserdel, name_}, &output);
  if (code != 0) {
    std::fprintf(stderr, "userdel %s failed (exit %d): %s\n", name_.c_str(),
                 code, output.c_str());
  }
}

std::string RunInChild(const SecondUser* user,
                       const std::function<std::string()>& body) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return "child failed: pipe";
  const pid_t pid = fork();
  if (pid < 0) return "child failed: fork";
  if (pid == 0) {
    close(pipe_fds[0]);
    if (user != nullptr &&
        (setgroups(0, nullptr) != 0 || setgid(user->gid()) != 0 ||
         setuid(user->uid()) != 0)) {
      _exit(3);
    }
    const std::string result = body();
    size_t written = 0;
    while (written < result.size()) {
      const ssize_t done =
          write(pipe_fds[1], result.data() + written, result.size() - written);
      if (done <= 0) break;
      written += static_cast<size_t>(done);
    }
    // No exit handlers: they belong to the parent (gtest, gRPC).
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string result;
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (true) {
    pollfd poll_fd{pipe_fds[0], POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0 || poll(&poll_fd, 1, static_cast<int>(left)) == 0) {
      kill(pid, SIGKILL);
      result = "child failed: no answer within a minute";
      break;
    }
    char buffer[4096];
    const ssize_t got = read(pipe_fds[0], buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    result.append(buffer, static_cast<size_t>(got));
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::StrCat("child failed: wait status ", status, "; ", result);
  }
  return result;
}

}  // namespace openreg
