"""The daemon's parts use only the parts below them that parts.bzl allows.

Reads device_daemon/parts.bzl (the one table of parts) and every source
file and BUILD of each part, and fails naming the file, the line and the
rule when a part reaches one it may not: a lower part including a higher
one (memory/ on server/, say), gRPC outside server/, libtorch outside
kernels/, collectives/ (whose reductions are ATen kernels) and server/'s
binary.
"""
import ast
import os
import re
import sys

import pytest

DAEMON = "device_daemon"
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^">]+)[">]', re.M)
LABEL = re.compile(r'"((?://|@)[^"]*)"')
# What only some parts may reach, as includes and as BUILD labels.
EXCLUSIVE = {
    ("server",): (("grpcpp/", "grpc/", "protos/control.grpc.pb.h"),
                  ("//third_party:grpc", "//protos:control_cc_grpc")),
    ("kernels", "collectives"): (("ATen/", "c10/", "torch/"), ("@libtorch",)),
}


def runfile(path):
    return os.path.join(os.environ.get("TEST_SRCDIR", "."),
                        os.environ.get("TEST_WORKSPACE", "openreg"), path)


def load_parts():
    with open(runfile(f"{DAEMON}/parts.bzl")) as f:
        module = ast.parse(f.read())
    for node in module.body:
        if (isinstance(node, ast.Assign)
                and node.targets[0].id == "DAEMON_PARTS"):
            return ast.literal_eval(node.value)
    raise AssertionError("device_daemon/parts.bzl defines no DAEMON_PARTS")


PARTS = load_parts()


def part_files(part):
    """(name, text) of the part's sources and BUILD."""
    folder = runfile(f"{DAEMON}/{part}")
    files = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            files.append((name, f.read()))
    return files


def lines_matching(text, pattern):
    for match in pattern.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(1)


def part_of(reference):
    """The daemon part an include or label names, or None."""
    match = re.match(rf"(?://)?{DAEMON}/([a-z_]+)", reference)
    return match.group(1) if match else None


def violations(part, may_use, files):
    found = []
    for name, text in files:
        pattern = LABEL if name == "BUILD" else INCLUDE
        for line, reference in lines_matching(text, pattern):
            where = f"{DAEMON}/{part}/{name}:{line}: {reference}"
            used = part_of(reference)
            if used is not None and used != part and used not in may_use:
                found.append(f"{where}: {part}/ may not use {used}/ "
                             f"(parts.bzl lets it use {may_use or 'nothing'})")
            for owners, (includes, labels) in EXCLUSIVE.items():
                prefixes = labels if name == "BUILD" else includes
                if part not in owners and reference.startswith(prefixes):
                    allowed = " and ".join(f"{owner}/" for owner in owners)
                    found.append(f"{where}: only {allowed} may use this")
    return found


@pytest.mark.parametrize("part", sorted(PARTS))
def test_part_reaches_only_the_parts_below_it_that_it_may_use(part):
    files = part_files(part)
    assert any(name.endswith(".h") for name, _ in files), part
    assert violations(part, PARTS[part], files) == []


def test_every_part_lists_only_known_parts_and_no_circle():
    for part, uses in PARTS.items():
        assert set(uses) <= set(PARTS), part
        assert part not in uses, part
    # Each part may use only parts listed before it: the table is bottom up.
    order = list(PARTS)
    for part, uses in PARTS.items():
        later = [used for used in uses if order.index(used) > order.index(part)]
        assert later == [], f"{part} uses parts above it: {later}"


def test_a_lower_part_reaching_a_higher_one_is_reported():
    source = '#include "device_daemon/base/log.h"\n' \
             '#include "device_daemon/server/daemon.h"\n'
    build = 'deps = ["//device_daemon/base", "//device_daemon/sessions"]'
    found = violations("memory", PARTS["memory"],
                       [("arena.cc", source), ("BUILD", build)])
    assert len(found) == 2
    assert "memory/arena.cc:2" in found[0] and "not use server/" in found[0]
    assert "memory/BUILD:1" in found[1] and "not use sessions/" in found[1]


def test_grpc_outside_server_and_libtorch_outside_kernels_are_reported():
    found = violations("execution", PARTS["execution"], [
        ("x.cc", "#include <ATen/ATen.h>\n#include \"grpcpp/grpcpp.h\"\n"),
        ("BUILD", '"//third_party:grpc", "@libtorch//:torch"'),
    ])
    assert [f.split(": only ")[1] for f in found] == [
        "kernels/ and collectives/ may use this", "server/ may use this",
        "server/ may use this", "kernels/ and collectives/ may use this"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
