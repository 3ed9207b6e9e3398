// The client's ATen settings on the wire (op_codec/kernel_settings.h) and
// the daemon's gate that runs each kernel with exactly its launch's
// settings (device_daemon/kernels/kernel_settings_gate.h).
#include "op_codec/kernel_settings.h"

#include <ATen/Parallel.h>
#include <c10/core/DefaultDtype.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "data_plane/error_codes.h"
#include "device_daemon/kernels/kernel_settings_gate.h"
#include "gtest/gtest.h"

namespace openreg::daemon {
namespace {

using op_codec::KernelSettings;

KernelSettings Float64Default() {
  KernelSettings settings;
  settings.default_dtype = c10::kDouble;
  return settings;
}

TEST(KernelSettingsTest, DefaultsTravelAsNothing) {
  proto::KernelSettings wire;
  op_codec::EncodeKernelSettings(KernelSettings(), &wire);
  EXPECT_EQ(wire.ByteSizeLong(), 0u);
}

TEST(KernelSettingsTest, ChangedSettingsRoundTrip) {
  KernelSettings settings;
  settings.default_dtype = c10::kDouble;
  settings.deterministic_algorithms = true;
  settings.deterministic_warn_only = true;
  settings.fill_uninitialized_memory = false;
  settings.mkldnn_matmul_precision = at::Float32Precision::BF16;
  settings.mkldnn_enabled = false;
  settings.deterministic_mkldnn = true;
  settings.allow_fp16_reduction_cpu = true;
  settings.allow_tf32_onednn = true;
  settings.flush_denormal = true;
  settings.intra_op_threads = 3;
  proto::KernelSettings wire;
  op_codec::EncodeKernelSettings(settings, &wire);
  absl::StatusOr<KernelSettings> decoded = op_codec::DecodeKernelSettings(wire);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(*decoded == settings);
}

TEST(KernelSettingsTest, HostileValuesAreRejected) {
  proto::KernelSettings wire;
  wire.set_default_dtype(3);  // Int: not a valid default dtype
  EXPECT_EQ(ErrorCodeOf(op_codec::DecodeKernelSettings(wire).status()),
            proto::INVALID_VALUE);
  wire.set_default_dtype(1000);
  EXPECT_FALSE(op_codec::DecodeKernelSettings(wire).ok());
  wire.Clear();
  wire.set_mkldnn_matmul_precision(7);
  EXPECT_FALSE(op_codec::DecodeKernelSettings(wire).ok());
  // A thread count the daemon would have to start: bounded.
  wire.Clear();
  wire.set_intra_op_threads(op_codec::kMaxIntraOpThreads + 1);
  EXPECT_EQ(ErrorCodeOf(op_codec::DecodeKernelSettings(wire).status()),
            proto::INVALID_VALUE);
  wire.set_intra_op_threads(0);
  EXPECT_FALSE(op_codec::DecodeKernelSettings(wire).ok());
}

TEST(KernelSettingsTest, TheThreadCountIsEachThreadsOwn) {
  KernelSettings two_threads;
  two_threads.intra_op_threads = 2;
  KernelSettings one_thread;
  one_thread.intra_op_threads = 1;
  EXPECT_FALSE(two_threads == one_thread);
  // Kernels with different counts need not take turns at the gate.
  EXPECT_TRUE(op_codec::SameProcessSettings(two_threads, one_thread));
  std::thread other([&] {
    op_codec::ApplyThreadSettings(one_thread);
    EXPECT_EQ(at::get_num_threads(), 1);
  });
  other.join();
  op_codec::ApplyThreadSettings(two_threads);
  EXPECT_EQ(at::get_num_threads(), 2);
}

TEST(KernelSettingsGateTest, KernelsWithTheSameSettingsRunTogether) {
  KernelSettingsGate gate;
  KernelSettingsGate::Pass first = gate.Enter(KernelSettings());
  // A second kernel with the same settings enters while the first runs
  // (it would deadlock here otherwise).
  KernelSettingsGate::Pass second = gate.Enter(KernelSettings());
  EXPECT_EQ(gate.switches(), 0u);
  EXPECT_EQ(c10::get_default_dtype_as_scalartype(), c10::kFloat);
}

TEST(KernelSettingsGateTest, OtherSettingsWaitForRunningKernelsThenSwitch) {
  KernelSettingsGate gate;
  std::atomic<bool> switched{false};
  std::thread waiter;
  {
    KernelSettingsGate::Pass running = gate.Enter(KernelSettings());
    waiter = std::thread([&] {
      KernelSettingsGate::Pass pass = gate.Enter(Float64Default());
      switched = true;
      EXPECT_EQ(c10::get_default_dtype_as_scalartype(), c10::kDouble);
    });
    while (gate.waiters() == 0) absl::SleepFor(absl::Milliseconds(1));
    // The running kernel still sees its own settings.
    EXPECT_FALSE(switched.load());
    EXPECT_EQ(c10::get_default_dtype_as_scalartype(), c10::kFloat);
  }
  waiter.join();
  EXPECT_TRUE(switched.load());
  EXPECT_EQ(gate.switches(), 1u);
  // And back for a default kernel.
  { KernelSettingsGate::Pass pass = gate.Enter(KernelSettings()); }
  EXPECT_EQ(c10::get_default_dtype_as_scalartype(), c10::kFloat);
  EXPECT_EQ(gate.switches(), 2u);
}

TEST(KernelSettingsGateTest, AWaitingSwitchIsNotStarvedByNewcomers) {
  KernelSettingsGate gate;
  absl::Notification waiter_done;
  std::thread waiter;
  std::thread newcomer;
  std::atomic<bool> newcomer_ran{false};
  {
    KernelSettingsGate::Pass running = gate.Enter(KernelSettings());
    waiter = std::thread([&] {
      KernelSettingsGate::Pass pass = gate.Enter(Float64Default());
      // The newcomer with the old settings came later: it waits.
      EXPECT_FALSE(newcomer_ran.load());
      waiter_done.Notify();
    });
    while (gate.waiters() == 0) absl::SleepFor(absl::Milliseconds(1));
    newcomer = std::thread([&] {
      KernelSettingsGate::Pass pass = gate.Enter(KernelSettings());
      newcomer_ran = true;
      EXPECT_TRUE(waiter_done.HasBeenNotified());
    });
    while (gate.waiters() < 2) absl::SleepFor(absl::Milliseconds(1));
    EXPECT_FALSE(newcomer_ran.load());
  }
  waiter.join();
  newcomer.join();
  EXPECT_TRUE(newcomer_ran.load());
}

}  // namespace
}  // namespace openreg::daemon
