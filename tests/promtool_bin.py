"""Where the tests find the real `promtool`: CRASHWATCH_PROMTOOL_BIN, or a build by scripts/build-promtool
from the Go module proxy (cached). Without Go the tests that need it skip, saying how to enable them;
under CI=true that is a failure, as for the control plane and Helm."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parent.parent / "scripts" / "build-promtool"
ENABLE = "install Go >= 1.26 (promtool is built from the Go module proxy by scripts/build-promtool)"


@functools.cache
def _build() -> Path:
    done = subprocess.run([str(BUILD)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def promtool() -> Path:
    """The `promtool` binary; skips (fails under CI) when it cannot be had."""
    if os.environ.get("CRASHWATCH_PROMTOOL_BIN"):
        folder = Path(os.environ["CRASHWATCH_PROMTOOL_BIN"])
    elif shutil.which("go") is None:
        if os.environ.get("CI"):
            pytest.fail(f"promtool tests must run under CI, but Go is not installed: {ENABLE}")
        pytest.skip(f"promtool tests skipped: Go is not installed; to run them, {ENABLE}")
    else:
        folder = _build()
    binary = folder / "promtool"
    if not os.access(binary, os.X_OK):
        raise FileNotFoundError(f"{binary} is missing: rebuild with scripts/build-promtool")
    return binary
