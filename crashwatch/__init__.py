"""crashwatch: tell a crash loop from a slow start in NVIDIA Dynamo graphs on Kubernetes.

This package is the command line and the wiring; the work is done in `stream`, `pipeline` and `sinks`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    # pyproject.toml's [project] version, as installed with the package: the one place it is written
    __version__ = version("crashwatch")
except PackageNotFoundError:
    # imported from a source tree that was never installed: there is no version to read, and a copy
    # written here would go stale unseen, so say so rather than guess
    __version__ = "unknown"
