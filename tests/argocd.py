"""The Argo CD health checks of the two Dynamo kinds (k8s/argocd), run as Argo CD runs them.

A check is run through its health.lua in Lua 5.1, the language of gopher-lua, with the global `obj` the
object (from a testdata file or read back from the API server) and only what Argo CD opens for a health
check configured in argocd-cm: the base and table libraries. `string`, `math`, `io`, `os`, `debug` and string
methods are gone, so a script that leans on them fails here as it would fail there (Argo CD then reports
the resource Unknown). Shared by the unit tests (the health_test.yaml cases) and the e2e tests (real objects)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import lupa.lua51 as lupa

ARGOCD = Path(__file__).resolve().parents[1] / "k8s" / "argocd"
CUSTOMIZATIONS = ARGOCD / "resource_customizations"
DCD = "nvidia.com/DynamoComponentDeployment"
DGD = "nvidia.com/DynamoGraphDeployment"
KINDS = (DCD, DGD)
# The codes Argo CD accepts from a script; anything else it turns into Unknown.
VALID = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}

# Argo CD leaves the standard libraries closed for a check from argocd-cm (unless
# resource.customizations.useOpenLibs.<group>_<kind> opens them): only package, base, table and a cut-down os.
SANDBOX = """
getmetatable("").__index = nil
string, math, io, os, debug, coroutine = nil, nil, nil, nil, nil, nil
"""


def to_lua(lua: Any, value: Any) -> Any:
    """A YAML value as Argo CD hands it to Lua: maps and lists as tables (lists 1-based), scalars as they are."""
    if isinstance(value, dict):
        table = lua.table()
        for key, item in value.items():
            table[key] = to_lua(lua, item)
        return table
    if isinstance(value, list):
        table = lua.table()
        for index, item in enumerate(value, start=1):
            table[index] = to_lua(lua, item)
        return table
    # Argo CD reads manifests as JSON: a timestamp YAML would parse as a date must be quoted, as kubectl does.
    assert not isinstance(value, datetime.date), f"unquoted timestamp {value!r}: quote it"
    return value


def health(kind: str, obj: dict[str, Any]) -> tuple[str, str]:
    """The (status, message) the kind's health.lua gives `obj`; a missing message is ""."""
    lua = lupa.LuaRuntime()
    lua.execute(SANDBOX)
    lua.globals().obj = to_lua(lua, obj)
    result = lua.execute((CUSTOMIZATIONS / kind / "health.lua").read_text())
    assert lupa.lua_type(result) == "table", f"the script returned {result!r}, not a table"
    status, message = result["status"], result["message"]
    assert status in VALID, f"Argo CD would turn {status!r} into Unknown"
    assert message is None or isinstance(message, str)
    return status, message or ""
