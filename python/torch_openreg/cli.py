"""Console script `openreg-daemon`: runs the packaged daemon binary."""

import os
import sys


def main():
    from torch_openreg import daemon_binary

    binary = daemon_binary()
    if not os.access(binary, os.X_OK):
        sys.exit(f"openreg-daemon: {binary} is missing; reinstall torch_openreg")
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == "__main__":
    main()
