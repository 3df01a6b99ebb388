"""Running the installed `crashwatch` command, as users and scripts do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def crashwatch_command() -> list[str]:
    script = Path(sys.executable).parent / "crashwatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "crashwatch"]


def run(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*crashwatch_command(), *args], input=stdin, capture_output=True, cwd=cwd, timeout=120, check=False
    )
