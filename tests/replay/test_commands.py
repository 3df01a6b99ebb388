"""The commands that need neither a log nor a cluster: `version` and `completion`, run as users run them
(the completion scripts loaded by the shells themselves, where they are installed); and explain's YAML."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from cli import run

from crashwatch import __version__


def test_version_as_text_json_and_yaml() -> None:
    assert run("version").stdout.decode() == f"crashwatch {__version__}\n" == run("--version").stdout.decode()
    document = json.loads(run("version", "-o", "json").stdout)
    assert document["version"] == __version__ and document["python"].count(".") == 2
    assert yaml.safe_load(run("version", "-o", "yaml").stdout) == document


def script(shell: str, folder: Path) -> Path:
    result = run("completion", shell)
    assert result.returncode == 0 and result.stderr == b""
    path = folder / f"crashwatch.{shell}"
    path.write_bytes(result.stdout)
    return path


BASH_DRIVER = """
source "$1"; shift
compopt() { :; }  # outside a real completion bash refuses it; what it sets is the shell's display alone
COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=()
_crashwatch
printf '%s\\n' "${COMPREPLY[@]}"
"""


def bash_completes(path: Path, *words: str) -> list[str]:
    done = subprocess.run(["bash", "-c", BASH_DRIVER, "bash", str(path), *words], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_completes_commands_flags_values_graphs_and_files(tmp_path: Path) -> None:
    path = script("bash", tmp_path)
    assert bash_completes(path, "crashwatch", "wa") == ["wait"]
    assert bash_completes(path, "kubectl-crashwatch", "comp") == ["completion"]
    assert bash_completes(path, "crashwatch", "get", "-o", "") == ["wide", "json", "yaml", "name"]
    assert bash_completes(path, "crashwatch", "tail", "--watch-i") == ["--watch-idle-timeout"]
    assert bash_completes(path, "crashwatch", "wait", "--no-h") == []  # `get` has --no-headers, `wait` not
    assert bash_completes(path, "crashwatch", "wait", "") == ["dgd/"]
    assert bash_completes(path, "crashwatch", "get", "-n", "") == []  # a namespace: nothing guessed
    assert bash_completes(path, "crashwatch", "replay", str(path)[:-3]) == [str(path)]
    assert bash_completes(path, "crashwatch", "completion", "") == ["bash", "zsh", "fish"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_commands_and_values(tmp_path: Path) -> None:
    path = script("fish", tmp_path)

    def completes(line: str) -> list[str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source {path}; complete -C '{line}'"], capture_output=True, text=True
        )
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return [entry.split("\t")[0] for entry in done.stdout.splitlines()]

    assert completes("crashwatch wa") == ["wait"]
    assert sorted(completes("crashwatch get -o ")) == ["json", "name", "wide", "yaml"]
    assert completes("kubectl-crashwatch tail --watch-i") == ["--watch-idle-timeout"]


ZSH_DRIVER = r"""
zmodload zsh/zpty
zpty shell 'zsh -f -i'
zpty -w shell "PROMPT='> '; autoload -U compinit; compinit -u -D; source $1"
zpty -w -n shell "$2"$'\t'
out=""
for i in {1..600}; do  # the words, or 60 s: a deadline only for a shell that never answers
  while zpty -r -t shell chunk; do out+=$chunk; done
  if [[ $out == *"$3"* ]]; then print -r -- "$out"; exit 0; fi
  sleep 0.1
done
print -r -- "$out"; exit 1
"""


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completes_through_compinit(tmp_path: Path) -> None:
    path = script("zsh", tmp_path)
    registered = subprocess.run(
        ["zsh", "-fc", f"autoload -U compinit; compinit -u -D; source {path}; print $_comps[crashwatch]"],
        capture_output=True,
        text=True,
    )
    assert registered.stdout.strip() == "_crashwatch", registered.stderr
    # in a real interactive zsh, TAB after `get -o` lists the output forms
    done = subprocess.run(
        ["zsh", "-f", "-c", ZSH_DRIVER, "zsh", str(path), "crashwatch get -o ", "yaml"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout
    listed = done.stdout.split("crashwatch get -o", 1)[-1]  # after the line typed: the list, the line again
    assert all(word in listed for word in ("json", "name", "wide", "yaml")), listed


def test_explain_says_the_same_as_a_yaml_document() -> None:
    oom = (
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        b"79.15 GiB of which 1.50 GiB is free.\n"
    )
    as_json = json.loads(run("explain", "-o", "json", stdin=oom).stdout)
    as_yaml = run("explain", "-o", "yaml", stdin=oom).stdout
    assert yaml.safe_load(as_yaml) == as_json and as_json["class"] == "gpu_oom"
    assert list(yaml.safe_load(as_yaml)) == list(as_json)  # the keys in the JSON object's order
