"""A work fingerprint against its snapshot: what changed, by how much, and where.

How it decides (``compare_work``):
- the ``work`` figures (float ops per sample, per audio second, per batch or step; bytes) change by
  more than ``TOLERANCE`` of the snapshot's value: changed;
- any structural fact (Python-function ops, prints, prefetch and its place, map parallelism, cache,
  padded shapes, XLA, traces, the stages): changed, whatever its size;
- the op histogram (a count of every op kind): changed on any difference;
- otherwise unchanged (figures inside the tolerance are named, and pass).

Every line names the fingerprint, the figure, the change and where it is, e.g.
``<loader>: float ops per audio-s +N.N % (+1 RFFT, +1 MatMul, ...)``: the figure, its
relative change and the op kinds whose float ops changed most, with the change of their counts.
The fingerprint is deterministic, so the tolerance only absorbs rounding of per-second figures:
a real change of work is larger than it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

TOLERANCE = 0.005  # relative change of a work figure that is still "the same work"
UNCHANGED, WITHIN, CHANGED, NEW = "unchanged", "within tolerance", "changed", "no snapshot"
FIGURE_WORDS = {
    "float_ops_per_sample": "float ops per sample",
    "float_ops_per_audio_s": "float ops per audio-s",
    "float_ops_per_batch": "float ops per batch",
    "float_ops_per_step": "float ops per step",
    "file_bytes_per_sample": "file bytes per sample",
    "element_bytes_per_sample": "element bytes per sample",
    "input_bytes_per_step": "input bytes per step",
    "variable_bytes": "variable bytes",
}
MAX_OPS_NAMED = 6


@dataclass(frozen=True)
class WorkVerdict:
    """One fingerprint's comparison: its decision, the lines that say what changed (failing ones in
    ``changes``, ones inside the tolerance in ``notes``)."""

    name: str
    decision: str  # UNCHANGED, WITHIN, CHANGED or NEW
    changes: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> bool:
        return self.decision == CHANGED

    def headline(self) -> str:
        """One short line: the first change (and how many more), or the decision."""
        if not self.changes:
            return self.decision
        first = self.changes[0].split(": ", 1)[-1]
        return first + (f"; {len(self.changes) - 1} more" if len(self.changes) > 1 else "")

    def message(self) -> str:
        lines = [*self.changes, *self.notes]
        return "\n".join(lines) if lines else f"{self.name}: work unchanged"


def compare_work(current: Mapping, snapshot: Mapping | None, *, tolerance: float = TOLERANCE) -> WorkVerdict:
    """``current`` and ``snapshot``: fingerprints as their snapshot dicts (WorkFingerprint.snapshot())."""
    name = current.get("name", "?")
    if snapshot is None:
        return WorkVerdict(name, NEW, notes=(f"{name}: no snapshot to compare with",))
    where = _ops_changed(snapshot.get("op_histogram", {}), current.get("op_histogram", {}))
    float_where = _float_ops_changed(snapshot, current)
    changes, notes = [], []
    for figure in sorted(set(snapshot.get("work", {})) | set(current.get("work", {}))):
        line, beyond = _figure_line(name, figure, snapshot.get("work", {}).get(figure),
                                    current.get("work", {}).get(figure), float_where or where, tolerance)
        if line is not None:
            (changes if beyond else notes).append(line)
    old_structure, new_structure = snapshot.get("structure", {}), current.get("structure", {})
    for key in sorted(set(old_structure) | set(new_structure)):
        if key == "stages" and any(k != "stages" and old_structure.get(k) != new_structure.get(k)
                                   for k in old_structure):
            continue  # a named fact already says what changed in the stages
        old, new = old_structure.get(key), new_structure.get(key)
        if old != new:
            changes.append(f"{name}: {key.replace('_', ' ')}: {_short(old)} -> {_short(new)}")
    if where and not changes:
        changes.append(f"{name}: op histogram: {where}")
    if changes and snapshot.get("tensorflow") != current.get("tensorflow"):
        notes.append(f"{name}: the snapshot was taken with TensorFlow {snapshot.get('tensorflow')}, this is "
                     f"{current.get('tensorflow')}: op-level changes may be TensorFlow's own")
    decision = CHANGED if changes else WITHIN if notes else UNCHANGED
    return WorkVerdict(name, decision, tuple(changes), tuple(notes))


def _figure_line(name, figure, old, new, where: str, tolerance: float) -> tuple[str | None, bool]:
    words = FIGURE_WORDS.get(figure, figure.replace("_", " "))
    suffix = f" ({where})" if where and figure.startswith("float_ops") else ""
    if old == new:
        return None, False
    if old is None or new is None:
        return f"{name}: {words}: {_short(old)} -> {_short(new)}{suffix}", True
    if old == 0:
        return f"{name}: {words}: 0 -> {new:,}{suffix}", True
    change = new / old - 1
    return f"{name}: {words} {change:+.1%}{suffix}".replace("%", " %"), abs(change) > tolerance


def _ops_changed(old: Mapping[str, int], new: Mapping[str, int]) -> str:
    """'+1 RFFT, +1 MatMul, -2 Mul': the op kinds whose counts changed, largest first."""
    deltas = {op: new.get(op, 0) - old.get(op, 0) for op in set(old) | set(new)}
    changed = sorted(((d, op) for op, d in deltas.items() if d), key=lambda item: (-abs(item[0]), item[1]))
    named = [f"{d:+d} {op}" for d, op in changed[:MAX_OPS_NAMED]]
    if len(changed) > MAX_OPS_NAMED:
        named.append(f"{len(changed) - MAX_OPS_NAMED} more kinds")
    return ", ".join(named)


def _float_ops_changed(old: Mapping, new: Mapping) -> str:
    """'+1 MatMul, +1 RFFT, +4 Mul': the op kinds whose float ops changed most, each with the change of
    its op count (or of its float ops, where its count stayed)."""
    old_flops, new_flops = old.get("float_ops_by_op", {}), new.get("float_ops_by_op", {})
    old_ops, new_ops = old.get("op_histogram", {}), new.get("op_histogram", {})
    deltas = {op: new_flops.get(op, 0) - old_flops.get(op, 0) for op in set(old_flops) | set(new_flops)}
    named = []
    for op, delta in sorted(((op, d) for op, d in deltas.items() if d), key=lambda item: (-abs(item[1]), item[0])):
        count = new_ops.get(op, 0) - old_ops.get(op, 0)
        if count:
            named.append(f"{count:+d} {op}")
        elif old_flops.get(op):
            named.append(f"{op} {delta / old_flops[op]:+.1%}".replace("%", " %"))
    return ", ".join(named[:MAX_OPS_NAMED // 2 + 1])


def _short(value, limit: int = 120) -> str:
    text = "none" if value is None else json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compare_sets(base: Mapping[str, Mapping], head: Mapping[str, Mapping], *,
                 tolerance: float = TOLERANCE) -> list[WorkVerdict]:
    """Two revisions' fingerprints by name (perfsuite ab): each of head's against base's; one only
    base has is reported as gone."""
    verdicts = [compare_work(head[name], base.get(name), tolerance=tolerance) for name in sorted(head)]
    verdicts += [WorkVerdict(name, CHANGED, changes=(f"{name}: not in the new revision",))
                 for name in sorted(set(base) - set(head))]
    return verdicts


def timed_reading(work: WorkVerdict, timed: str | None) -> str:
    """The two layers side by side: what a work verdict and the timed verdict of the same benchmark
    (``timed``: 'pass', 'fail', 'inconclusive', 'not judged' where it ran with no gate, or None where
    it did not run) say together."""
    if work.decision == NEW:
        return "no work snapshot"
    changed = work.failed
    if timed is None:
        return "work changed; not timed in this run" if changed else "same work; not timed in this run"
    if timed == "not judged":
        return "work changed; timed, but no gate judged it" if changed else "same work; timed, no gate"
    if changed and timed == "fail":
        return "work changed; the timing sees it too"
    if changed:
        return f"work changed; the timing does not see it ({timed})"
    if timed == "fail":
        return "same work, slower: the machine, a kernel, I/O or contention"
    return f"same work; timing {timed}"
