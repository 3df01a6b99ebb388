"""`crashwatch completion bash|zsh|fish`: the shell's completion script, written from the parser itself.

The script is made from the argparse parser the command line runs (crashwatch.cli), so a new flag or
command completes without anyone editing a script: the commands, each command's flags, the values of a
flag that has choices (`-o json`), files where a flag or argument names a file, and `dgd/` for the graphs
of `wait` and `get`. Nothing is asked of the cluster while completing (kubectl asks its API server for
names; a completion that hangs on an unreachable cluster is worse than none).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from typing import Literal

Shell = Literal["bash", "zsh", "fish"]
SHELLS: tuple[Shell, ...] = ("bash", "zsh", "fish")
PROGRAMS = ("crashwatch", "kubectl-crashwatch")
FILE_METAVARS = ("PATH", "FILE", "LOG")


@dataclass
class Flag:
    names: list[str]
    help: str
    takes_value: bool = False
    choices: list[str] = field(default_factory=list)
    files: bool = False  # the value is a path
    repeats: bool = False


@dataclass
class Command:
    name: str
    help: str
    flags: list[Flag]
    # what its positional arguments are: files, graphs (dgd/NAME), or fixed words; none
    positional: Literal["files", "graphs", "words", "none"] = "none"
    words: list[str] = field(default_factory=list)


def commands(parser: argparse.ArgumentParser) -> list[Command]:
    """The parser's commands, their flags and what their arguments are."""
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            found.append(_command(name, helps.get(name, ""), sub))
    return found


def _command(name: str, help: str, parser: argparse.ArgumentParser) -> Command:
    command = Command(name, _short(help), [])
    for action in parser._actions:
        if action.option_strings:
            command.flags.append(_flag(action))
            continue
        metavar = str(action.metavar or action.dest)
        if action.choices:
            command.positional, command.words = "words", [str(c) for c in action.choices]
        elif metavar.startswith("dgd/"):
            command.positional = "graphs"
        elif metavar in FILE_METAVARS:
            command.positional = "files"
    return command


def _flag(action: argparse.Action) -> Flag:
    # a flag whose value may be left out (--events, --fail-fast) completes as a plain flag
    takes_value = action.nargs not in (0, "?")
    return Flag(
        names=list(action.option_strings),
        help=_short(action.help or ""),
        takes_value=takes_value,
        choices=[str(c) for c in action.choices or ()] if takes_value else [],
        files=takes_value and str(action.metavar) in FILE_METAVARS,
        repeats=isinstance(action, argparse._AppendAction),
    )


def _short(help: str) -> str:
    """A help text's first clause, without the characters a shell's quoting or zsh's specs would trip on."""
    first = re.split(r" \(|: |; |, |\. ", help.replace("%%", "%"), maxsplit=1)[0]
    return re.sub(r"[^A-Za-z0-9 ./=+_-]", "", first)[:70].strip()


def script(shell: Shell, parser: argparse.ArgumentParser) -> str:
    found = commands(parser)
    if shell == "bash":
        return _bash(found)
    if shell == "zsh":
        return _zsh(found)
    return _fish(found)


def _bash(found: list[Command]) -> str:
    words = " ".join([c.name for c in found] + ["-h", "--help", "--version"])
    cases = "".join(_bash_case(c) for c in found)
    return f"""\
# crashwatch completion for bash: source <(crashwatch completion bash), or save it in a file that bash
# reads at start (/etc/bash_completion.d/crashwatch).
_crashwatch() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" command="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        if [[ "${{COMP_WORDS[i]}}" != -* ]]; then command="${{COMP_WORDS[i]}}"; break; fi
    done
    COMPREPLY=()
    case "$command" in
    "") COMPREPLY=($(compgen -W "{words}" -- "$cur")) ;;
{cases}    esac
}}
complete -F _crashwatch {" ".join(PROGRAMS)}
"""


def _bash_case(command: Command) -> str:
    values = ""
    free: list[str] = []  # flags whose value is anybody's guess: nothing is offered
    for flag in command.flags:
        if not flag.takes_value:
            continue
        names = "|".join(flag.names)
        if flag.choices:
            values += f'        {names}) COMPREPLY=($(compgen -W "{" ".join(flag.choices)}" -- "$cur")); return ;;\n'
        elif flag.files:
            values += f'        {names}) compopt -o filenames; COMPREPLY=($(compgen -f -- "$cur")); return ;;\n'
        else:
            free += flag.names
    if free:
        values += f"        {'|'.join(free)}) return ;;\n"
    flags = " ".join(name for flag in command.flags for name in flag.names)
    arguments = {
        "files": 'compopt -o filenames; COMPREPLY=($(compgen -f -- "$cur"))',
        "graphs": 'COMPREPLY=($(compgen -W "dgd/" -- "$cur")); compopt -o nospace',
        "words": f'COMPREPLY=($(compgen -W "{" ".join(command.words)}" -- "$cur"))',
        "none": ":",
    }[command.positional]
    return (
        f"    {command.name})\n"
        + (f'        case "$prev" in\n{values}        esac\n' if values else "")
        + f'        if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "{flags}" -- "$cur")); '
        + f"else {arguments}; fi ;;\n"
    )


def _zsh(found: list[Command]) -> str:
    described = "".join(f"    '{c.name}:{c.help}'\n" for c in found)
    cases = "".join(_zsh_case(c) for c in found)
    return f"""\
#compdef {" ".join(PROGRAMS)}
# crashwatch completion for zsh: source <(crashwatch completion zsh) after compinit, or save it as
# _crashwatch in a folder of $fpath.
_crashwatch() {{
  local -a commands
  commands=(
{described}  )
  if (( CURRENT == 2 )); then
    _describe -t commands 'crashwatch command' commands
    return
  fi
  local command=$words[2]
  shift words
  (( CURRENT-- ))
  case $command in
{cases}  esac
}}
if [[ "$funcstack[1]" == "_crashwatch" ]]; then
  _crashwatch "$@"
else
  compdef _crashwatch {" ".join(PROGRAMS)}
fi
"""


def _zsh_case(command: Command) -> str:
    specs = [_zsh_spec(flag) for flag in command.flags]
    specs.append(
        {
            "files": "'*:file:_files'",
            "graphs": "'*:graph:(dgd/)'",
            "words": f"'1:{command.name}:({' '.join(command.words)})'",
            "none": "",
        }[command.positional]
    )
    lines = " \\\n      ".join(spec for spec in specs if spec)
    return f"  ({command.name})\n    _arguments -s -S \\\n      {lines}\n    ;;\n"


def _zsh_spec(flag: Flag) -> str:
    names = flag.names
    value = ""
    if flag.takes_value:
        what = names[-1].lstrip("-")
        action = f"({' '.join(flag.choices)})" if flag.choices else "_files" if flag.files else " "
        value = f":{what}:{action}"
    if flag.repeats:
        return "'*'" + _zsh_names(names, f"[{flag.help}]{value}")
    exclusive = f"({' '.join(names)})" if len(names) > 1 else ""
    return f"'{exclusive}'" + _zsh_names(names, f"[{flag.help}]{value}")


def _zsh_names(names: list[str], rest: str) -> str:
    if len(names) == 1:
        return f"'{names[0]}{rest}'"
    return "{" + ",".join(names) + "}" + f"'{rest}'"


def _fish(found: list[Command]) -> str:
    lines = [
        "# crashwatch completion for fish: crashwatch completion fish | source, or save it as",
        "# ~/.config/fish/completions/crashwatch.fish.",
        f"for prog in {' '.join(PROGRAMS)}",
        "    complete -c $prog -f",
        "    complete -c $prog -n __fish_use_subcommand -l version -d 'print the version'",
    ]
    for command in found:
        lines.append(f"    complete -c $prog -n __fish_use_subcommand -a {command.name} -d '{command.help}'")
        seen = f"-n '__fish_seen_subcommand_from {command.name}'"
        for flag in command.flags:
            names = " ".join(f"-s {n[1:]}" if len(n) == 2 else f"-l {n[2:]}" for n in flag.names)
            value = ""
            if flag.takes_value:
                value = f" -x -a '{' '.join(flag.choices)}'" if flag.choices else " -r -F" if flag.files else " -x"
            lines.append(f"    complete -c $prog {seen} {names}{value} -d '{flag.help}'")
        argument = {
            "files": " -F",
            "graphs": " -a dgd/",
            "words": f" -a '{' '.join(command.words)}'",
            "none": "",
        }[command.positional]
        if argument:
            lines.append(f"    complete -c $prog {seen}{argument}")
    lines.append("end")
    return "\n".join(lines) + "\n"
