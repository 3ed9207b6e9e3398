// A parallel region opened from the daemon's code runs on libtorch's
// OpenMP team (device_daemon/base/openmp_parallel.h).
#include "device_daemon/base/openmp_parallel.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace openreg::daemon {
namespace {

pid_t ThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

class OpenMpParallelTest : public ::testing::Test {
 protected:
  // libtorch's count on this thread: what the team's size defaults to.
  void SetUp() override { at::set_num_threads(3); }
  void TearDown() override { at::set_num_threads(1); }
};

TEST_F(OpenMpParallelTest, EveryThreadOfTheTeamRunsTheBodyOnce) {
  ASSERT_TRUE(OpenMpLoaded());  // libtorch brought libgomp
  absl::Mutex mutex;
  std::vector<int> threads_seen;
  std::vector<pid_t> ids;
  std::atomic<int> in_aten_region{0};
  RunOnOpenMpTeam(3, [&](int thread, int team_size) {
    EXPECT_EQ(team_size, 3);
    // ATen's own regions nest inline inside this one.
    if (at::in_parallel_region()) in_aten_region.fetch_add(1);
    const absl::MutexLock lock(&mutex);
    threads_seen.push_back(thread);
    ids.push_back(ThreadId());
  });
  std::sort(threads_seen.begin(), threads_seen.end());
  EXPECT_EQ(threads_seen, (std::vector<int>{0, 1, 2}));
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end());  // distinct
  EXPECT_EQ(in_aten_region.load(), 3);
}

TEST_F(OpenMpParallelTest, TheCallingThreadIsThreadZero) {
  const pid_t caller = ThreadId();
  std::atomic<pid_t> zero{0};
  RunOnOpenMpTeam(2, [&](int thread, int /*team_size*/) {
    if (thread == 0) zero.store(ThreadId());
  });
  EXPECT_EQ(zero.load(), caller);
}

TEST_F(OpenMpParallelTest, OneThreadRunsOnTheCaller) {
  const pid_t caller = ThreadId();
  int calls = 0;
  RunOnOpenMpTeam(1, [&](int thread, int team_size) {
    EXPECT_EQ(thread, 0);
    EXPECT_EQ(team_size, 1);
    EXPECT_EQ(ThreadId(), caller);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST_F(OpenMpParallelTest, ARegionInsideARegionRunsOnItsThread) {
  std::atomic<int> inner_calls{0};
  RunOnOpenMpTeam(2, [&](int /*thread*/, int /*team_size*/) {
    const pid_t outer = ThreadId();
    RunOnOpenMpTeam(2, [&](int thread, int team_size) {
      EXPECT_EQ(thread, 0);
      EXPECT_EQ(team_size, 1);
      EXPECT_EQ(ThreadId(), outer);
      inner_calls.fetch_add(1);
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);
}

TEST_F(OpenMpParallelTest, AnExceptionOnAnyThreadReachesTheCaller) {
  std::atomic<int> calls{0};
  EXPECT_THROW(RunOnOpenMpTeam(3,
                               [&](int thread, int /*team_size*/) {
                                 calls.fetch_add(1);
                                 if (thread == 2) {
                                   throw std::runtime_error("from thread 2");
                                 }
                               }),
               std::runtime_error);
  EXPECT_EQ(calls.load(), 3);  // the others ran to the end
}

}  // namespace
}  // namespace openreg::daemon
