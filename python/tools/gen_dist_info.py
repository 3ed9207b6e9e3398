"""Writes a .dist-info folder from pyproject.toml so that a Bazel runfiles
tree exposes the same `torch.backends` entry point as a pip install."""
import os
import sys
import tomllib


def main(pyproject_path, out_dir):
    with open(pyproject_path, "rb") as f:
        project = tomllib.load(f)["project"]
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
    main(sys.argv[1], sys.argv[2])
