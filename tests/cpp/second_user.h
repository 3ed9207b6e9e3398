// A second local Unix user for tests of what another user can do to the
// daemon: created with useradd when the test runs as root (CI does), and
// deleted again when the test is done. Tests skip, saying why, elsewhere.
#ifndef OPENREG_TESTS_CPP_SECOND_USER_H_
#define OPENREG_TESTS_CPP_SECOND_USER_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace openreg {

// Empty when a second user can be created here, else why not (for
// GTEST_SKIP).
std::string WhyNoSecondUser();

class SecondUser {
 public:
  // useradd of a fresh system user "ortest<pid>" (no home, no shell);
  // users left behind by earlier test processes that died are removed
  // first.
  static absl::StatusOr<std::unique_ptr<SecondUser>> Create();
  SecondUser(const SecondUser&) = delete;
  SecondUser& operator=(const SecondUser&) = delete;
  ~SecondUser();  // userdel

  const std::string& name() const { return name_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }

 private:
  SecondUser(std::string name, uid_t uid, gid_t gid)
      : name_(std::move(name)), uid_(uid), gid_(gid) {}

  std::string name_;
  uid_t uid_;
  gid_t gid_;
};

// Runs `body` in a forked child — as `user` when not null, else as this
// process's user — and returns what it returned. A child keeps gRPC out of
// the parent: a process that forks must not have started gRPC yet. Returns
// "child failed: ..." when the child crashed or ran for over a minute.
std::string RunInChild(const SecondUser* user,
                       const std::function<std::string()>& body);

}  // namespace openreg

#endif  // OPENREG_TESTS_CPP_SECOND_USER_H_
