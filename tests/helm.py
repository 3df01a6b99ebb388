"""The real Helm 4 (scripts/build-waiters' build, through waiters_bin) as every tier and bench runs it: with
cache, config and data homes of its own, so no run reads another's repositories or the user's."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from waiters_bin import waiters_bin


def helm_env(home: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """The environment of a helm run whose homes are under `home`, against `kubeconfig`'s cluster if given."""
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


class Helm:
    """helm with homes under `home`; in `namespace` when given (added to every command)."""

    def __init__(
        self, home: Path, kubeconfig: Path | None = None, namespace: str | None = None, timeout: float = 180
    ) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.binary, self.home, self.namespace, self.timeout = waiters_bin() / "helm", home, namespace, timeout
        self.env = helm_env(home, kubeconfig)

    def command(self, *args: str) -> list[str]:
        return [str(self.binary), *args, *(("--namespace", self.namespace) if self.namespace else ())]

    def run(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args), env=self.env, capture_output=True, text=True, timeout=timeout or self.timeout
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    @contextmanager
    def start(self, name: str, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
        """helm in the background with --debug, its output in `name`.log; killed on the way out if still running."""
        log = self.home / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                self.command(*args, "--debug"), env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            yield process, log
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=15)
