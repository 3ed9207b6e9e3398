// What the daemon reads of a client process from /proc: a client that
// exits while it is read yields "", never an exception.
#include "device_daemon/base/process_info.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

TEST(ProcessInfoTest, ReadsItsOwnCommandLineOnOneLine) {
  const std::string line = ProcessCommandLine(getpid());
  EXPECT_NE(line.find("process_info_test"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(ProcessInfoTest, AProcessThatIsGoneGivesAnEmptyLine) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(ProcessCommandLine(child), "");
}

TEST(ProcessInfoTest, AProcessExitingWhileReadNeverThrows) {
  // Races each read against the child's exit; with stream iterators a
  // read after the exit threw (ESRCH) and ended the daemon.
  for (int i = 0; i < 200; ++i) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(0);
    const std::string line = ProcessCommandLine(child);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
}

}  // namespace
}  // namespace openreg::daemon
