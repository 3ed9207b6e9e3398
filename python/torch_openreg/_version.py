"""The one place the openreg version is written. pyproject.toml reads it
(dynamic version), and Bazel generates data_plane/version.h from it, which
the daemon and the runtime client report in their handshake."""
__version__ = "0.1.0"
