"""What a verdict says of one Pod: the `Finding`, which diagnosis it is, and its words.

Every rule (the crash loop, the diagnoses beside it, a backend's own) returns a `Finding`, and every sink
reads one, so it sits below them all: the rules import it, and it imports no rule. A finding knows its own
words (`describe`), built from its fields alone; a backend's finding (a LeaderWorkerSet group's loop) carries
its own fields and words (`part`, `text`), which the core passes on without reading them.
"""

from __future__ import annotations

import msgspec

from pipeline.causes import Cause

# Finding.diagnosis: "" is the crash loop of the upstream rule (pipeline.crashloop); the others are the
# diagnoses beside it (pipeline.diagnoses)
CRASH_LOOP = ""
OOM_KILLED = "oom_killed"
RESTART_LOOP = "restart_loop"
IMAGE_PULL = "image_pull_failing"
CONFIG_ERROR = "config_error"
UNSCHEDULABLE = "unschedulable"
# a crash whose cause, read from the crashed run's output, is certain to come back at every restart (a gated
# model stays gated): failed at the first crash, without waiting for the crash loop (pipeline.crash_causes)
CERTAIN_CRASH = "certain_crash"

# A backend's own fields of a finding, in the order it shows them: (name, value); the last is the count
# that climbs while the loop goes on (a LeaderWorkerSet group's recreations), shown where a crash loop
# shows its restarts.
Part = tuple[tuple[str, str | int], ...]


class Finding(msgspec.Struct, frozen=True, gc=False):
    """What makes one Pod fail: the container, how often it restarted, how it last exited."""

    pod: str
    container: str
    restarts: int
    exit_code: int
    reason: str = ""
    # a backend's own finding (pipeline.backends): its fields, and its words (the fields above are then
    # those of the last failure it saw, where it saw one)
    part: Part = ()
    text: str = ""
    # the diagnoses beside the crash loop (pipeline.diagnoses): which one (CRASH_LOOP is the crash loop of
    # the upstream rule), what kubelet or the scheduler said of it, the time its grace counts from (RFC
    # 3339; "": from when it was first seen), and the container's memory limit where an OOM kill is the
    # cause (of the crash loop's finding too, where the spec sets one)
    diagnosis: str = ""
    detail: str = ""
    since: str = ""
    memory_limit: str = ""
    # why the container crashed, read from the crashed run's output (pipeline.causes): its words, built from
    # the cause's class and fields alone, close the finding's
    cause: Cause | None = None

    def describe(self) -> str:
        words = self._words()
        return f"{words}: {self.cause.words()}" if self.cause is not None else words

    def _words(self) -> str:
        if self.text:
            return self.text
        if self.diagnosis:
            return _diagnosis_words(self)
        why = f" ({self.reason})" if self.reason and self.reason != "Error" else ""
        if self.memory_limit:  # an OOM kill's (pipeline.diagnoses adds it)
            why = f" ({self.reason}, memory limit {self.memory_limit})"
        return (
            f"container {self.container} of Pod {self.pod} restarted {self.restarts} times "
            f"and is down after exit code {self.exit_code}{why}"
        )


def _diagnosis_words(finding: Finding) -> str:
    """A finding of a diagnosis beside the crash loop, in words."""
    where = f"container {finding.container} of Pod {finding.pod}"
    detail = f": {finding.detail}" if finding.detail else ""
    kind = finding.diagnosis
    if kind == IMAGE_PULL:
        return f"{where} cannot pull its image ({finding.reason}){detail}"
    if kind == CONFIG_ERROR:
        return f"{where} cannot be created ({finding.reason}){detail}"
    if kind == UNSCHEDULABLE:
        return f"Pod {finding.pod} cannot be scheduled{detail}"
    if kind == OOM_KILLED:
        limit = f"memory limit {finding.memory_limit}" if finding.memory_limit else "no memory limit"
        return (
            f"{where} restarted {finding.restarts} times and is down after being OOM-killed "
            f"({limit}, exit code {finding.exit_code})"
        )
    if kind == CERTAIN_CRASH:
        return f"{where} crashed (exit code {finding.exit_code}) with a cause a restart cannot cure"
    if kind == RESTART_LOOP:
        return (
            f"{where} restarted {finding.restarts} times and is down after exit code 0 "
            "(restartPolicy Always restarts it forever)"
        )
    return f"{where}: {kind}"
