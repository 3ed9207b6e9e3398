// Stream priorities, as PyTorch exposes CUDA's: 0 is the default and the
// lowest, -3 the highest. Values outside the range are clamped, as
// cudaStreamCreateWithPriority does: the client clamps to pick a stream
// pool, the daemon clamps what a (possibly hostile) client asked for.
#ifndef OPENREG_DATA_PLANE_STREAM_PRIORITY_H_
#define OPENREG_DATA_PLANE_STREAM_PRIORITY_H_

#include <algorithm>

namespace openreg {

inline constexpr int kLeastStreamPriority = 0;
inline constexpr int kGreatestStreamPriority = -3;
inline constexpr int kStreamPriorityLevels =
    kLeastStreamPriority - kGreatestStreamPriority + 1;

constexpr int ClampStreamPriority(int priority) {
  return std::clamp(priority, kGreatestStreamPriority, kLeastStreamPriority);
}

}  // namespace openreg

#endif  // OPENREG_DATA_PLANE_STREAM_PRIORITY_H_
