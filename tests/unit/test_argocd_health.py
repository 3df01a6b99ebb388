"""k8s/argocd: the Argo CD health checks of the two Dynamo kinds, run as Argo CD runs them.

Every case of each kind's health_test.yaml (Argo CD's own layout, so the folders can go upstream as they
are) is run through its health.lua in Lua 5.1, the language of gopher-lua, with the global `obj` the object
read from the case's testdata and only what Argo CD opens for a health check configured in argocd-cm: the
base and table libraries. `string`, `math`, `io`, `os`, `debug` and string methods are gone, so a script
that leans on them fails here as it would fail there (Argo CD then reports the resource Unknown).
The argocd-cm snippet must carry the very same scripts. The runner lives in tests/argocd.py, shared with
tests/e2e/test_argocd.py, which runs the checks on the objects `crashwatch run` marks on the API server."""

from __future__ import annotations

from typing import Any

import lupa.lua51 as lupa
import pytest
import yaml
from argocd import ARGOCD, CUSTOMIZATIONS, KINDS, SANDBOX, health


def cases(kind: str) -> list[dict[str, Any]]:
    tests: list[dict[str, Any]] = yaml.safe_load((CUSTOMIZATIONS / kind / "health_test.yaml").read_text())["tests"]
    return tests


ALL = [(kind, case) for kind in KINDS for case in cases(kind)]


@pytest.mark.parametrize(("kind", "case"), ALL, ids=[f"{kind.split('/')[1]}/{case['inputPath']}" for kind, case in ALL])
def test_the_check_says_what_the_case_expects(kind: str, case: dict[str, Any]) -> None:
    obj = yaml.safe_load((CUSTOMIZATIONS / kind / case["inputPath"]).read_text())
    assert obj["apiVersion"] == "nvidia.com/v1beta1" and f"nvidia.com/{obj['kind']}" == kind
    expected = case["healthStatus"]
    # As Argo CD's own test: a case without a message expects none.
    assert health(kind, obj) == (expected["status"], expected.get("message", ""))


@pytest.mark.parametrize("kind", KINDS)
def test_every_testdata_file_is_a_case_and_every_verdict_is_covered(kind: str) -> None:
    used = [case["inputPath"] for case in cases(kind)]
    assert used, "no cases"
    assert len(used) == len(set(used)), "a testdata file used twice"
    on_disk = sorted(f"testdata/{p.name}" for p in (CUSTOMIZATIONS / kind / "testdata").iterdir())
    assert sorted(used) == on_disk
    assert {case["healthStatus"]["status"] for case in cases(kind)} == {"Healthy", "Progressing", "Degraded"}


def test_only_the_two_dynamo_kinds_have_checks() -> None:
    found = sorted(str(p.parent.relative_to(CUSTOMIZATIONS)) for p in CUSTOMIZATIONS.rglob("health.lua"))
    assert found == sorted(KINDS)


def test_the_sandbox_refuses_what_argocd_refuses() -> None:
    lua = lupa.LuaRuntime()
    lua.execute(SANDBOX)
    for script in ('return string.format("%d", 1)', 'return ("x"):upper()', "return math.floor(1.5)"):
        with pytest.raises(lupa.LuaError):
            lua.execute(script)
    assert lua.execute('return table.concat({"a", "b"}, ", ") .. tostring(2)') == "a, b2"


@pytest.mark.parametrize(
    "status",
    [None, {}, {"conditions": None}, {"conditions": []}, {"conditions": [{}]}, {"conditions": [{"type": "Stalled"}]}],
    ids=["none", "empty", "null-conditions", "no-conditions", "empty-condition", "condition-without-status"],
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_sparse_object_is_progressing_not_an_error(kind: str, status: Any) -> None:
    obj: dict[str, Any] = {"apiVersion": "nvidia.com/v1beta1", "kind": kind.split("/")[1]}
    if status is not None:
        obj["status"] = status
    assert health(kind, obj)[0] == "Progressing"


def test_the_argocd_cm_snippet_carries_the_scripts_byte_for_byte() -> None:
    snippet = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert (snippet["apiVersion"], snippet["kind"], snippet["metadata"]["name"]) == ("v1", "ConfigMap", "argocd-cm")
    # argocd-cm keys cannot hold a "/": Argo CD spells group/Kind as group_Kind there.
    wanted = {f"resource.customizations.health.{kind.replace('/', '_')}": kind for kind in KINDS}
    assert set(snippet["data"]) == set(wanted)
    for key, kind in wanted.items():
        script = (CUSTOMIZATIONS / kind / "health.lua").read_text()
        assert snippet["data"][key] == script, f"{key} differs from {kind}/health.lua: copy the script in again"
