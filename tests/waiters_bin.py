"""Where the e2e tests find the real `helm` (v4) and the `kstatus` helper: CRASHWATCH_WAITERS_BIN, or a
build by scripts/build-waiters from the Go module proxy (cached). Without Go the tests that need them
skip, saying how to enable them; under CI=true that is a failure, as for the control plane."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parent.parent / "scripts" / "build-waiters"
ENABLE = "install Go >= 1.26 (helm and the kstatus helper are built from the Go module proxy by scripts/build-waiters)"


@functools.cache
def _build() -> Path:
    done = subprocess.run([str(BUILD)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def waiters_bin() -> Path:
    """The folder holding `helm` and `kstatus`; skips (fails under CI) when they cannot be had."""
    if os.environ.get("CRASHWATCH_WAITERS_BIN"):
        folder = Path(os.environ["CRASHWATCH_WAITERS_BIN"])
    elif shutil.which("go") is None:
        if os.environ.get("CI"):
            pytest.fail(f"helm and kstatus tests must run under CI, but Go is not installed: {ENABLE}")
        pytest.skip(f"helm and kstatus tests skipped: Go is not installed; to run them, {ENABLE}")
    else:
        folder = _build()
    for name in ("helm", "kstatus"):
        if not os.access(folder / name, os.X_OK):
            raise FileNotFoundError(f"{folder / name} is missing: rebuild with scripts/build-waiters")
    return folder
