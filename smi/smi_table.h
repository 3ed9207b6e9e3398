// openreg-smi's default view, laid out like nvidia-smi's: the daemon, a
// table of devices and one of processes.
#ifndef OPENREG_SMI_SMI_TABLE_H_
#define OPENREG_SMI_SMI_TABLE_H_

#include <string>
#include <vector>

#include "smi/daemon_snapshot.h"

namespace openreg::smi {

// `only`: the devices of --id (empty: all).
std::string RenderTable(const DaemonSnapshot& snapshot,
                        const std::vector<int>& only);

// -L: "GPU 0: openreg emulated device (daemon pid 42, socket PATH)".
std::string RenderDeviceList(const DaemonSnapshot& snapshot,
                             const std::vector<int>& only);

}  // namespace openreg::smi

#endif  // OPENREG_SMI_SMI_TABLE_H_
