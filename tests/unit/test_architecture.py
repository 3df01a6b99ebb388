"""docs/architecture.md lists the files a new backend touches: the list is checked against the
LeaderWorkerSet backend's own code, so it cannot drift from the code it describes."""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from pathlib import Path

from pipeline.backends.base import Backend
from pipeline.backends.registry import BACKENDS

TOP = Path(__file__).resolve().parents[2]
# the LeaderWorkerSet backend's names: where code names one of them, the backend touched the file
LWS_NAMES = frozenset({"LwsView", "LeaderWorkerSet", "LEADERWORKERSETS", "LwsGroups", "lws_view", "group_identity"})
# what a listed path's placeholders are for the LeaderWorkerSet backend
LWS_PLACEHOLDERS = {"<name>": "lws", "<its CRD>": "leaderworkerset.x-k8s.io_leaderworkersets"}


def listed() -> set[str]:
    """The product files of the list in "How to add a backend", placeholders filled in for LWS."""
    text = (TOP / "docs" / "architecture.md").read_text()
    section = text.split("### How to add a backend", 1)[1].split("\n### ", 1)[0]
    items = [line for line in section.splitlines() if line.startswith("- `") or line.startswith("  `")]
    paths: set[str] = set()
    for item in items:
        for path in re.findall(r"`([^`]+)`", item.split(":", 1)[0]):
            for placeholder, value in LWS_PLACEHOLDERS.items():
                path = path.replace(placeholder, value)
            paths.add(path)
    assert paths, "no list under 'How to add a backend'"
    return paths


def names_in_code(path: Path) -> set[str]:
    """The names a Python file's code uses (its comments and docstrings left out)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_every_file_the_list_names_exists() -> None:
    product = {p for p in listed() if not p.startswith(("tests/", "docs/"))}
    missing = sorted(p for p in product if not (TOP / p).is_file())
    assert not missing, f"listed in docs/architecture.md but not in the tree: {missing}"


def test_the_lws_backend_touches_only_listed_files() -> None:
    """Every product file whose code names the LeaderWorkerSet backend, and every manifest that grants
    or installs LeaderWorkerSets, is on the list."""
    paths = listed()
    touched: set[str] = set()
    for package in ("crashwatch", "stream", "pipeline", "sinks"):
        for source in (TOP / package).rglob("*.py"):
            names = names_in_code(source)
            if names & LWS_NAMES or {"pipeline.backends.lws", "pipeline.backends.lws_groups"} & names:
                touched.add(source.relative_to(TOP).as_posix())
    for folder in ("k8s", "charts"):
        for manifest in (TOP / folder).rglob("*"):
            if manifest.is_file() and re.search(r"leaderworkerset", manifest.read_text(), re.IGNORECASE):
                touched.add(manifest.relative_to(TOP).as_posix())
    assert "pipeline/backends/lws.py" in touched  # the check sees the backend at all
    unlisted = sorted(touched - paths)
    assert not unlisted, f"the LeaderWorkerSet backend touches files docs/architecture.md does not list: {unlisted}"


def test_the_count_the_list_states_is_the_count_of_files_it_lists() -> None:
    text = (TOP / "docs" / "architecture.md").read_text()
    section = text.split("### How to add a backend", 1)[1].split("\n### ", 1)[0]
    stated = re.search(r"touches these (\d+) files", section)
    assert stated is not None, "the list no longer says how many files a backend touches"
    assert int(stated.group(1)) == len(listed())


def test_every_registered_backend_is_a_module_of_its_own() -> None:
    modules = [backend.__module__ for backend in BACKENDS]
    assert len(set(modules)) == len(modules)
    assert all(module.startswith("pipeline.backends.") for module in modules)
    assert all(issubclass(backend, Backend) for backend in BACKENDS)


def _imports_of(path: Path, modules: Collection[str]) -> set[str]:
    """Which of `modules` a file imports, at its top or inside a function (`from a import b`, b a module
    of its own, imports b)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(modules)
            found |= submodules or {node.module}
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & set(modules)


def test_the_pure_core_has_no_circle() -> None:
    """No module of pipeline/ reaches itself through what it imports (a function-level import counts)."""
    modules = {
        ".".join(source.relative_to(TOP).with_suffix("").parts).removesuffix(".__init__"): source
        for source in (TOP / "pipeline").rglob("*.py")
    }
    graph = {name: sorted(_imports_of(path, modules.keys()) - {name}) for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done

    def walk(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in graph[name]:
            if state.get(target) == 1:
                circle = [*path[path.index(target) :], target]
                raise AssertionError(f"a circle in pipeline/: {' -> '.join(circle)}")
            if target not in state:
                walk(target, [*path, target])
        state[name] = 2

    assert graph.get("pipeline.aggregate")  # the walk sees imports at all
    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
