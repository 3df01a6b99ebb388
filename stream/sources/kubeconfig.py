"""Where the API server is and who we are: the kubeconfig or the in-cluster service account, as kubectl finds them.

kubernetes-asyncio reads the configuration (contexts, exec plugins, token files, client certificates);
this module picks which one, checks what kubectl checks before it, and says what is wrong in the words
of a kubeconfig's user (a missing context, a certificate file that is not there, a credential plugin
that is not installed), never in the library's (`Expected key current-context`, `File does not exists`,
`'utf-8' codec can't decode`).
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"


class ConfigError(Exception):
    """No usable kubeconfig or in-cluster configuration; the message says what is wrong."""


def quiet_library() -> None:
    """The client library logs some failures before raising them (a credential plugin that cannot be run):
    with no handler of its own that reaches stderr as a bare extra line, beside the one line crashwatch
    says about the same failure."""
    library = logging.getLogger("kubernetes_asyncio")
    if not library.handlers:
        library.addHandler(logging.NullHandler())
    library.propagate = False


def read_kubeconfig(file: str) -> dict[str, Any]:
    """One kubeconfig file as a mapping; what keeps it from being one is said in one line."""
    try:
        data = Path(file).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"kubeconfig {file}: cannot be read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"kubeconfig {file}: not text (byte {exc.start} is 0x{data[exc.start]:02x}, which UTF-8 has no "
            "place for): not a kubeconfig"
        ) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"kubeconfig {file}: not YAML{at}: {problem}") from None
    if document is None:
        raise ConfigError(f"kubeconfig {file}: is empty")
    if not isinstance(document, dict):
        raise ConfigError(f"kubeconfig {file}: not a kubeconfig (a YAML mapping with clusters, users, contexts)")
    return document


def in_cluster(path: str | None, context: str | None) -> bool:
    """Whether to use the in-cluster service account: no kubeconfig or context was asked for, and this
    runs in a Pod that has one."""
    return (
        path is None
        and context is None
        and "KUBERNETES_SERVICE_HOST" in os.environ
        and (SERVICE_ACCOUNT / "token").exists()
    )


def load_in_cluster(configuration: Any) -> tuple[str, str]:
    """The service account's configuration; the namespace it runs in (its file, else default), and the source."""
    from kubernetes_asyncio import config

    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    namespace = "default"
    namespace_file = SERVICE_ACCOUNT / "namespace"
    if namespace_file.exists():
        namespace = namespace_file.read_text().strip() or namespace
    return namespace, "in-cluster service account"


async def load_kubeconfig(path: str, context: str | None, configuration: Any) -> tuple[str, str]:
    """The kubeconfig's configuration (`path` may list several files, as $KUBECONFIG does); the context's
    namespace (else default), and the source. What is wrong with it is said in one line."""
    from kubernetes_asyncio import config

    # start-up, before any other task runs: a stat of the kubeconfig blocks nobody
    files = [p for p in path.split(os.pathsep) if p and Path(p).expanduser().exists()]  # noqa: ASYNC240
    if not files:
        raise ConfigError(f"no kubeconfig at {path} and not running in a cluster")
    documents = [read_kubeconfig(file) for file in files]
    _check_context(path, documents, context)
    try:
        loader = await config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration, persist_config=False
        )
    except OSError as exc:
        if exc.filename is not None and str(exc.filename) in _plugins(documents):
            # the one file the loader runs rather than reads: an exec credential plugin
            missing = isinstance(exc, FileNotFoundError)
            raise ConfigError(
                f"kubeconfig {path}: its credential plugin {exc.filename} (exec) "
                + ("is not installed: not found on the PATH" if missing else f"cannot be run: {exc.strerror}")
            ) from None
        raise
    current = loader.current_context or {}
    namespace = (current.get("context") or {}).get("namespace") or "default"
    return namespace, f"kubeconfig {path}" + (f", context {context}" if context else "")


def _plugins(documents: list[dict[str, Any]]) -> set[str]:
    """The exec credential plugins the kubeconfig's users run."""
    commands = set()
    for document in documents:
        for user in document.get("users") or []:
            plugin = ((user or {}).get("user") or {}).get("exec") if isinstance(user, dict) else None
            if isinstance(plugin, dict) and plugin.get("command"):
                commands.add(str(plugin["command"]))
    return commands


def _check_context(path: str, documents: list[dict[str, Any]], context: str | None) -> None:
    """The context asked for is there, or, with none asked for, the kubeconfig names a current one, as
    kubectl checks: `--context` is taken whether or not the kubeconfig has a current-context."""
    names: list[str] = []
    for document in documents:
        contexts = document.get("contexts") or []
        if isinstance(contexts, list):
            names += [str(c["name"]) for c in contexts if isinstance(c, dict) and c.get("name") is not None]
    having = f"it has {', '.join(names)}" if names else "it has no context at all"
    if context is not None:
        if context not in names:
            raise ConfigError(f"kubeconfig {path}: no context named {context!r} ({having})")
        return
    if not any(document.get("current-context") for document in documents):
        raise ConfigError(f"kubeconfig {path}: no current-context; name one with --context ({having})")


def api_client(configuration: Any, source: str) -> Any:
    """The client library's ApiClient, which builds the TLS context: a CA or client certificate that cannot
    be read or used is said in one line."""
    from kubernetes_asyncio import client

    try:
        return client.ApiClient(configuration)
    except (ssl.SSLError, OSError) as exc:
        certificates = ", ".join(f for f in (configuration.ssl_ca_cert, configuration.cert_file) if f)
        why = getattr(exc, "reason", None) or exc.strerror or exc
        raise ConfigError(f"{source}: its certificates ({certificates}) cannot be used: {why}") from None


_LIBRARY_WORDS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"File does not exists: (.*)"), r"the file \1 that it names does not exist"),
    (re.compile(r"Invalid kube-config file\. Expected key (\S+) in (.*)"), r"\2 has no \1"),
    (re.compile(r"Invalid kube-config file\. Expected object with name (.*) in (\S+) list"), r"no \2 entry named \1"),
    (re.compile(r"Invalid kube-config file\. Expected (\S+) to be a list"), r"\1 is not a list"),
    (
        re.compile(r"Invalid kube-config file\. Expected all values in (\S+) list to have 'name' key"),
        r"an entry of \1 has no name",
    ),
    (
        re.compile(r"exec: process returned (\d+)\.? ?(.*)", re.DOTALL),
        r"its credential plugin (exec) failed with exit \1: \2",
    ),
    (re.compile(r"exec: (.*)", re.DOTALL), r"its credential plugin (exec): \1"),
]


def user_words(exc: BaseException) -> str:
    """What the client library raised while loading a configuration, in a kubeconfig user's words."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    text = str(exc).strip()
    for pattern, words in _LIBRARY_WORDS:
        found = pattern.fullmatch(text)
        if found is not None:
            return found.expand(words).strip().rstrip(":")
    return text or type(exc).__name__
