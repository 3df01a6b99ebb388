"""How soon a command gives up on an API server it cannot reach (issue 34), beside kubectl and a bare socket.

    python -m bench.reach              # 5 runs of each
    python -m bench.reach --runs 20
    python -m bench.reach --quick      # 1 run of each: does it run

Four servers that cannot be reached, all on loopback but the name: a closed port (connection refused), a
name that does not resolve (`name.invalid`, RFC 6761), a TLS server whose certificate no CA of the
kubeconfig signed (a test CA's, served by tests/fakeapi.py), and a port that takes connections and never
answers (a listening socket nobody accepts from: the TLS handshake waits). For each it times, from the
start of the process to its exit, `crashwatch get -A` and `crashwatch wait dgd/llm --timeout 10m -o json`
(each must exit 68), `kubectl get pods -A` where kubectl is on the PATH (the peer: it must fail), all with
`--request-timeout 2s`; and, in this process, a bare `socket.create_connection` and TLS handshake (the
network's own part, no interpreter to start). The floor is the start-up a live command cannot avoid: a
Python that imports crashwatch.live and the Kubernetes client library, and exits.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakeapi import ServedFake  # noqa: E402
from operators import webhook_certs  # noqa: E402

UNREACHABLE = 68
TIMEOUT = "2s"


def kubeconfig(folder: Path, name: str, server: str) -> Path:
    path = folder / f"{name}.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
            }
        )
    )
    return path


@contextmanager
def servers(folder: Path) -> Iterator[dict[str, str]]:
    """The four servers that cannot be reached, by case: their URLs, for as long as the block runs."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused = closed.getsockname()[1]  # let go at once: nothing listens there
    certs = webhook_certs(()).write(folder / "certs")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    untrusted = ServedFake(tls=tls)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # the kernel completes the connections; nobody ever reads them
    try:
        yield {
            "connection refused": f"https://127.0.0.1:{refused}",
            "name does not resolve": "https://name.invalid:6443",
            "certificate not trusted": untrusted.api.url,
            "no answer (2s timeout)": f"https://127.0.0.1:{silent.getsockname()[1]}",
        }
    finally:
        silent.close()
        untrusted.stop()


def crashwatch() -> list[str]:
    script = Path(sys.executable).parent / "crashwatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "crashwatch"]


def timed(argv: list[str], expect: Callable[[int], bool]) -> float:
    """Seconds from start to exit of a process; its exit code must be what `expect` takes."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, timeout=300, check=False)
    elapsed = time.perf_counter() - start
    if not expect(done.returncode):
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr.decode(errors='replace')}")
    return elapsed


def unreachable(code: int) -> bool:
    return code == UNREACHABLE


def bare(url: str) -> float:
    """A TCP connection and a TLS handshake, as any client makes them first: the network's own part."""
    host, port = url.removeprefix("https://").rsplit(":", 1)
    start = time.perf_counter()
    try:
        with socket.create_connection((host, int(port)), timeout=2) as sock:
            ssl.create_default_context().wrap_socket(sock, server_hostname=host).close()
    except OSError:  # refused, no such host, not trusted, timed out: each the failure being timed
        pass
    return time.perf_counter() - start


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one run of each")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    kubectl = shutil.which("kubectl")
    floor = [
        timed([sys.executable, "-c", "import crashwatch.live, kubernetes_asyncio.client"], lambda c: c == 0)
        for _ in range(runs)
    ]
    print(f"start-up floor (import crashwatch.live and the client library), median / max: {summary(floor)} s")
    print(f"{runs} runs each, seconds from start to exit, median / max; --request-timeout {TIMEOUT}")
    print("| case | crashwatch get -A | crashwatch wait -o json | kubectl get pods -A | socket + TLS handshake |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp, servers(Path(tmp)) as urls:
        for case, url in urls.items():
            config = str(kubeconfig(Path(tmp), case.split()[0], url))
            common = ["--kubeconfig", config, "--request-timeout", TIMEOUT]
            get = [timed([*crashwatch(), "get", "-A", *common], unreachable) for _ in range(runs)]
            waiting = [*crashwatch(), "wait", "dgd/llm", "--timeout", "10m", "-o", "json", *common]
            wait = [timed(waiting, unreachable) for _ in range(runs)]
            peer = "-"
            if kubectl is not None:
                argv = [kubectl, "get", "pods", "-A", "--kubeconfig", config, "--request-timeout", TIMEOUT]
                peer = summary([timed(argv, lambda c: c != 0) for _ in range(runs)])
            network = summary([bare(url) for _ in range(runs)])
            print(f"| {case} | {summary(get)} | {summary(wait)} | {peer} | {network} |")


if __name__ == "__main__":
    main()
