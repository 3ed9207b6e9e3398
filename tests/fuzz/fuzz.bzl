"""openreg_fuzz_test: one fuzz target, two drivers.

`name` is a cc_test that runs the target's seeds and then mutations of them
for `fuzz_seconds` under GoogleTest (fuzz_test_main.cc): part of `bazel test
//...` and `make test`. `name + "_libfuzzer"` is the same target linked with
libFuzzer; it only builds with --config=fuzz (clang) and is run by `make
fuzz` (hence tagged manual: `//...` skips it).
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

def openreg_fuzz_test(name, srcs, deps = [], fuzz_seconds = 3, size = "small"):
    cc_library(
        name = name + "_target",
        testonly = True,
        srcs = srcs,
        deps = deps + [":fuzz_target"],
        alwayslink = True,
    )
    cc_test(
        name = name,
        size = size,
        args = ["--fuzz_seconds=%d" % fuzz_seconds],
        deps = [
            ":" + name + "_target",
            ":gtest_driver",
        ],
    )
    cc_binary(
        name = name + "_libfuzzer",
        testonly = True,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
        deps = [
            ":" + name + "_target",
            ":libfuzzer_driver",
        ],
    )
