"""Which components a change of a graph's spec replaces: until their Pods of the old spec are gone, those
no longer count.

A fix goes in as a spec change, and the Pods of the old spec linger on their way out: the Dynamo operator
rolls a new generation of worker DCDs and deletes the old one only once the new one is Ready, and a
Deployment keeps an old Pod until its successor is available. Were their crashes to count, the graph would
read failed at the new generation (kstatus `Failed`: a `helm upgrade --wait` carrying the fix would fail)
for as long as they linger. So the crash-loop evidence of a replaced component is tied to the spec it came
from: the Pods the component has when the change is seen stop counting, and only its Pods made after the
change can make it crash-loop again.

What a change replaces: a change of scaling fields alone replaces nothing; a change of the graph-wide spec
replaces every component; a change of one worker-type component replaces every worker-type one (the
operator rolls all workers as one generation); another component's change replaces that component.
A change that replaces no Pod after all (a field the Pods do not carry) must not hide a crash loop for
good: if no new Pod of the component shows up within the replacement grace, its Pods count again.
"""

from __future__ import annotations

from stream.model.objects import ComponentTemplate, GraphTemplates

WORKER_TYPES = frozenset({"worker", "prefill", "decode"})
REPLACEMENT_GRACE = 60.0  # seconds for a replaced component's first new Pod to show up


def replaced(old: GraphTemplates, new: GraphTemplates) -> list[str]:
    """The names of the components whose Pods a change from `old` to `new` replaces, sorted. A spec that
    could not be read on either side tells nothing, and replaces nothing."""
    if not old.shared or not new.shared:
        return []
    before = {c.name: c for c in old.components}
    after = {c.name: c for c in new.components}
    names = before.keys() | after.keys()
    if old.shared != new.shared:
        return sorted(names)
    changed = {name for name in names if before.get(name) != after.get(name)}
    workers = {name for name in names if _worker(before.get(name)) or _worker(after.get(name))}
    if changed & workers:
        changed |= workers
    return sorted(changed)


def _worker(component: ComponentTemplate | None) -> bool:
    return component is not None and component.type in WORKER_TYPES
