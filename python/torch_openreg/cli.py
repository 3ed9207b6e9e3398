"""Console scripts `openreg-daemon`, `openreg-ctl` and `openreg-smi`: run
the packaged binaries. `openreg-smi --prometheus-port N` runs the Prometheus
exporter (smi_exporter.py) instead. None of them imports torch."""

import os
import sys


def _exec(name, binary):
    if not os.access(binary, os.X_OK):
        sys.exit(f"{name}: {binary} is missing; reinstall torch_openreg")
    os.execv(binary, [binary] + sys.argv[1:])


def main():
    from torch_openreg import daemon_binary

    _exec("openreg-daemon", daemon_binary())


def ctl_main():
    from torch_openreg import ctl_binary

    _exec("openreg-ctl", ctl_binary())


def smi_main():
    from torch_openreg import smi_binary

    if any(arg == "--prometheus-port" or arg.startswith("--prometheus-port=")
           for arg in sys.argv[1:]):
        from torch_openreg import smi_exporter

        sys.exit(smi_exporter.main(sys.argv[1:]))
    _exec("openreg-smi", smi_binary())


if __name__ == "__main__":
    main()
