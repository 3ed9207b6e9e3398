"""Packages the Bazel-built artifacts (_C.so, openreg-daemon) with the
Python sources. Build them first: `bazel build //python:package_files`
(`make setup` does both). Install with `pip install --no-build-isolation`.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
BAZEL_BIN = os.environ.get(
    "OPENREG_BAZEL_BIN", os.path.join(HERE, os.pardir, "bazel-bin"))
ARTIFACTS = ["torch_openreg/_C.so", "torch_openreg/bin/openreg-daemon",
             "torch_openreg/bin/openreg-ctl", "torch_openreg/bin/openreg-smi"]


class BuildWithBazelArtifacts(build_py):
    def run(self):
        for artifact in ARTIFACTS:
            source = os.path.join(BAZEL_BIN, "python", artifact)
            if not os.path.exists(source):
                raise SystemExit(
                    f"{source} is missing: run `bazel build //python:package_files`"
                    " (or `make setup`) before installing torch_openreg")
            target = os.path.join(HERE, artifact)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)
            os.chmod(target, 0o755)
        super().run()


setup(cmdclass={"build_py": BuildWithBazelArtifacts})
