"""Writes a .dist-info folder from pyproject.toml (and the version from
torch_openreg/_version.py) so that a Bazel runfiles tree exposes the same
`torch.backends` entry point as a pip install."""
import os
import re
import sys
import tomllib


def read_version(version_path):
    with open(version_path) as f:
        return re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)


def main(pyproject_path, version_path, out_dir):
    with open(pyproject_path, "rb") as f:
        project = tomllib.load(f)["project"]
    project["version"] = read_version(version_path)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\n")
        f.write(f"Name: {project['name']}\nVersion: {project['version']}\n")
    with open(os.path.join(out_dir, "entry_points.txt"), "w") as f:
        for group, entries in project.get("entry-points", {}).items():
            f.write(f"[{group}]\n")
            for name, target in entries.items():
                f.write(f"{name} = {target}\n")
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
