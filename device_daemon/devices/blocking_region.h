// Managed blocking for commands that wait. An executor thread that is about
// to wait for something other than its own work — another stream's counter
// (WaitStream, the fences of FreeMemory), an interprocess event, an
// injected hang or slowdown, another runner's end — holds a BlockingRegion
// for the wait. Meanwhile its device's scheduler keeps `executors` other
// threads available (waking an idle one or starting a spare), so that:
// - a wait for another stream's later work never deadlocks, even with one
//   executor per device: the awaited stream gets a thread;
// - a hung stream never stops the device's other streams.
// Enter a region only when the wait is real (the condition was checked and
// does not hold yet): each entry may start a thread.
//
// Outside an executor (control threads, tests) a region does nothing.
// Regions nest; only the outermost one counts.
#ifndef OPENREG_DEVICE_DAEMON_DEVICES_BLOCKING_REGION_H_
#define OPENREG_DEVICE_DAEMON_DEVICES_BLOCKING_REGION_H_

#include "device_daemon/devices/device_scheduler.h"

namespace openreg::daemon {

class BlockingRegion {
 public:
  BlockingRegion()
      : scheduler_(Depth()++ == 0 ? DeviceScheduler::Current() : nullptr) {
    if (scheduler_ != nullptr) scheduler_->EnterBlocking();
  }
  BlockingRegion(const BlockingRegion&) = delete;
  BlockingRegion& operator=(const BlockingRegion&) = delete;
  ~BlockingRegion() {
    if (scheduler_ != nullptr) scheduler_->LeaveBlocking();
    --Depth();
  }

 private:
  static int& Depth() {
    thread_local int depth = 0;
    return depth;
  }

  DeviceScheduler* const scheduler_;
};

}  // namespace openreg::daemon

#endif  // OPENREG_DEVICE_DAEMON_DEVICES_BLOCKING_REGION_H_
