"""Broken configuration and a server that is no API server: one line that names the problem, exit 78 or 69."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli import run


def kubeconfig(tmp_path: Path, server: str, ca: Path | None = None) -> Path:
    cluster = f'{{server: "{server}"' + (f", certificate-authority: {ca}" if ca is not None else "") + "}"
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {cluster}}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
        "users: [{name: u, user: {token: abc}}]\n"
    )
    return path


def one_line(result: object) -> str:
    err = result.stderr.decode()  # type: ignore[attr-defined]
    assert b"Traceback" not in result.stderr  # type: ignore[attr-defined]
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "text,says",
    [
        ("", "is empty"),
        ("clusters: [\n", "not YAML at line 2"),
        ("- just\n- a list\n", "not a kubeconfig"),
    ],
)
def test_a_kubeconfig_that_is_empty_or_not_yaml_is_exit_78_naming_it(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    result = run("tail", "--kubeconfig", str(path))
    assert result.returncode == 78
    line = one_line(result)
    assert line.startswith(f"crashwatch: kubeconfig {path}: ") and says in line


def test_a_certificate_authority_that_is_not_pem_is_exit_78_naming_it(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("this is no certificate\n")
    result = run("tail", "--kubeconfig", str(kubeconfig(tmp_path, "https://127.0.0.1:1", ca)))
    assert result.returncode == 78
    assert str(ca) in one_line(result) and "cannot be used" in one_line(result)


class _Html(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><html><body>Please sign in</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def html_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("command", ["tail", "run", "wait"])
def test_a_server_answering_html_is_said_in_one_line(tmp_path: Path, html_server: str, command: str) -> None:
    args = ["dgd/llm"] if command == "wait" else []
    result = run(command, *args, "--kubeconfig", str(kubeconfig(tmp_path, html_server)))
    assert result.returncode == 69
    line = one_line(result)
    assert "not JSON" in line and "<!doctype html>" in line and "Kubernetes API server" in line
    assert "not served" not in line
