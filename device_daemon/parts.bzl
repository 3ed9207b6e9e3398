"""The daemon's parts, bottom up, and which parts each may use.

Written once here: every part's BUILD takes its visibility from this table
(so a BUILD dependency on a part not listed fails at analysis), and
//tests/layering:daemon_layering_test holds every #include of the daemon's
sources against it. docs/ARCHITECTURE.md ("The daemon's folders") says what
each part owns.
"""

# part -> the parts it may use (besides itself). Room for the parts to
# come: telemetry/ sits above execution/ and below server/, as
# collectives/ and graphs/ do.
DAEMON_PARTS = {
    "base": [],
    "memory": ["base"],
    "devices": ["base", "memory"],
    "sessions": ["base", "memory", "devices"],
    "ipc": ["base", "memory", "devices", "sessions"],
    "execution": ["base", "memory", "devices", "sessions", "ipc"],
    "faults": ["base", "memory", "devices", "sessions", "ipc", "execution"],
    "kernels": ["base", "memory", "devices", "sessions", "ipc", "execution"],
    "collectives": [
        "base",
        "memory",
        "devices",
        "sessions",
        "ipc",
        "execution",
    ],
    "graphs": [
        "base",
        "memory",
        "devices",
        "sessions",
        "ipc",
        "execution",
    ],
    "server": [
        "base",
        "memory",
        "devices",
        "sessions",
        "ipc",
        "execution",
        "faults",
        "kernels",
        "collectives",
        "graphs",
    ],
}

def users_of(part):
    """The visibility of `part`'s targets: the parts that may use it, and tests."""
    return [
        "//device_daemon/%s:__pkg__" % user
        for user, uses in DAEMON_PARTS.items()
        if part in uses
    ] + ["//tests:__subpackages__"]

def layering_inputs():
    """The package's sources and BUILD, read by the layering test."""
    native.filegroup(
        name = "layering_inputs",
        srcs = native.glob(["*.h", "*.cc"]) + ["BUILD"],
        visibility = ["//tests/layering:__pkg__"],
    )
