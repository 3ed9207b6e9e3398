"""Console scripts `openreg-daemon` and `openreg-ctl`: run the packaged
binaries."""

import os
import sys


def main():
    from torch_openreg import daemon_binary

    binary = daemon_binary()
    if not os.access(binary, os.X_OK):
        sys.exit(f"openreg-daemon: {binary} is missing; reinstall torch_openreg")
    os.execv(binary, [binary] + sys.argv[1:])


def ctl_main():
    from torch_openreg import ctl_binary

    binary = ctl_binary()
    if not os.access(binary, os.X_OK):
        sys.exit(f"openreg-ctl: {binary} is missing; reinstall torch_openreg")
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == "__main__":
    main()
