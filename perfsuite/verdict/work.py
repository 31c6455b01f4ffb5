"""A work fingerprint against its snapshot: what changed, by how much, and where.

How it decides (``compare_work``):
- the ``work`` figures (float ops per sample, per audio second, per batch or step; bytes) change by
  more than ``TOLERANCE`` of the snapshot's value: changed;
- any structural fact (Python-function ops, prints, prefetch and its place, map parallelism, cache,
  padded shapes, XLA, traces, the stages): changed, whatever its size;
- the op histogram (a count of every op by op and dtype) or the Python bodies' call histogram: changed
  on any difference;
- otherwise unchanged (figures inside the tolerance are named, and pass).

On another TensorFlow or numpy version (the snapshot's major.minor differs) the figures are still judged:
a figure beyond the tolerance fails, naming the version change as a possible cause and the command that
accepts it (``rerecord``). Only the exact histograms (op kinds, Python calls), which a library's own
rewrites move without changing the work, do not fail there: a difference in them with unchanged figures is
a note naming the command that re-records the snapshots. ``WorkVerdict.versions`` says which versions
differ, so the run's summary can say it first.

Every line names the fingerprint, the figure, the change and where it is, e.g.
``<loader>: float ops per audio-s +N.N % (+1 RFFT:complex128, +1 MatMul:float32, ...)``: the figure, its
relative change and the op kinds whose float ops changed most, with the change of their counts.
The fingerprint is deterministic, so the tolerance only absorbs rounding of per-second figures:
a real change of work is larger than it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from perfsuite.errors import PerfsuiteError

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
    "python_work_per_sample": "Python work per sample",
    **{f"elementwise_elements_per_{per}": f"elementwise elements per {per}" for per in ("sample", "step")},
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
    versions: str = ""  # 'TensorFlow 2.20, this is 2.21' where the snapshot came from other versions

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


class SnapshotUnreadable(PerfsuiteError, ValueError):
    """A work snapshot that cannot be compared with: names the file, the expectation, what was found and
    the command that writes it again."""

    def __init__(self, path: str, expected: str, found: str, rerecord: str):
        self.path, self.expected, self.found, self.rerecord = path, expected, found, rerecord
        super().__init__(f"{path}: expected {expected}, found {found}; rewrite it with: {rerecord}")

    def __reduce__(self):
        return (type(self), (self.path, self.expected, self.found, self.rerecord))


def read_snapshot(path: Path, schema_version: int, rerecord: str) -> dict:
    """A work snapshot file (YAML, as pytest-regressions writes it) as its dict; SnapshotUnreadable where it
    is not YAML, not a mapping, or of another schema version."""
    import yaml

    try:
        snapshot = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise SnapshotUnreadable(str(path), "a YAML work snapshot", f"unreadable YAML ({error})", rerecord) from error
    found = snapshot.get("schema_version") if isinstance(snapshot, dict) else type(snapshot).__name__
    if not isinstance(snapshot, dict) or found != schema_version:
        raise SnapshotUnreadable(str(path), f"a work snapshot of schema_version {schema_version}",
                                 f"schema_version {found}" if isinstance(snapshot, dict) else found, rerecord)
    return snapshot


def compare_work(current: Mapping, snapshot: Mapping | None, *, tolerance: float = TOLERANCE,
                 rerecord: str | None = None) -> WorkVerdict:
    """``current`` and ``snapshot``: fingerprints as their snapshot dicts (WorkFingerprint.snapshot()).
    ``rerecord``: the command that re-records the snapshot, named where the versions differ."""
    name = current.get("name", "?")
    if snapshot is None:
        return WorkVerdict(name, NEW, notes=(f"{name}: no snapshot to compare with",))
    figures = _figure_changes(name, current, snapshot, tolerance)
    structure = _structure_changes(name, current.get("structure", {}), snapshot.get("structure", {}))
    histograms = _histogram_changes(name, current, snapshot) if not figures[0] and not structure else []
    versions = _versions_differ(current, snapshot)
    changes, notes = [*figures[0], *structure], list(figures[1])
    if not versions:
        changes += histograms
    elif changes:
        changes.append(f"{name}: the snapshot was taken with {versions}: the change may be the library's; "
                       + (f"accept it with: {rerecord}" if rerecord else "re-record the snapshot to accept it"))
    else:  # the same work under other versions: never silent, never a failure
        notes += histograms
        moved = "; the exact histograms moved with the library" if histograms else ""
        notes.append(f"{name}: the snapshot was taken with {versions}: the work figures are the same{moved}"
                     + (f"; re-record the snapshots with: {rerecord}" if rerecord else ""))
    decision = CHANGED if changes else WITHIN if notes else UNCHANGED
    return WorkVerdict(name, decision, tuple(changes), tuple(notes), versions)


def versions_note(verdicts) -> str | None:
    """One line for the top of a run's output where some snapshots came from other library versions."""
    differing = sorted({v.versions for v in verdicts if v.versions})
    if not differing:
        return None
    return (f"work snapshots recorded with other library versions ({'; '.join(differing)}): their figures are "
            "judged, their exact histograms reported, not failed")


def installed_versions() -> dict[str, str]:
    """The major.minor of TensorFlow and numpy as installed, read from their distributions (no import)."""
    from importlib.metadata import PackageNotFoundError, version

    from perfsuite.measure.work import minor

    found = {}
    for key in ("tensorflow", "numpy"):
        with contextlib.suppress(PackageNotFoundError):
            found[key] = minor(version(key))
    return found


def snapshots_versions(directory: Path) -> str:
    """'TensorFlow 2.20, this is 2.21' where the snapshots in ``directory`` were recorded with another
    major.minor of TensorFlow or numpy than the installed one; '' where none was (or none is there)."""
    import yaml

    installed, words = installed_versions(), set()
    for path in sorted(Path(directory).glob("*.yml")):
        with contextlib.suppress(OSError, yaml.YAMLError):
            snapshot = yaml.safe_load(path.read_text(encoding="utf-8"))
            if isinstance(snapshot, dict):
                words.add(_versions_differ(installed, snapshot))
    return "; ".join(sorted(w for w in words if w))


def _versions_differ(current: Mapping, snapshot: Mapping) -> str:
    """'TensorFlow 2.20, this is 2.21' where a library's major.minor differs; '' where none does."""
    words = []
    for key, library in (("tensorflow", "TensorFlow"), ("numpy", "numpy")):
        old, new = snapshot.get(key), current.get(key)
        if old is not None and new is not None and old != new:
            words.append(f"{library} {old}, this is {new}")
    return "; ".join(words)


def _figure_changes(name: str, current: Mapping, snapshot: Mapping, tolerance: float) -> tuple[list, list]:
    """(lines beyond the tolerance, lines within it) of the work figures, each naming where it changed."""
    where = _ops_changed(snapshot.get("op_histogram", {}), current.get("op_histogram", {}))
    calls = _ops_changed(snapshot.get("python_calls", {}), current.get("python_calls", {}))
    float_where = _float_ops_changed(snapshot, current) or where
    by_figure = {"python": calls, "elementwise": where, "float_ops": float_where}
    changes, notes = [], []
    for figure in sorted(set(snapshot.get("work", {})) | set(current.get("work", {}))):
        line, beyond = _figure_line(name, figure, snapshot.get("work", {}).get(figure),
                                    current.get("work", {}).get(figure),
                                    next((v for k, v in by_figure.items() if figure.startswith(k)), ""), tolerance)
        if line is not None:
            (changes if beyond else notes).append(line)
    return changes, notes


def _histogram_changes(name: str, current: Mapping, snapshot: Mapping) -> list[str]:
    """The op histogram's and the Python call histogram's changes, where no figure or fact said more."""
    where = _ops_changed(snapshot.get("op_histogram", {}), current.get("op_histogram", {}))
    calls = _ops_changed(snapshot.get("python_calls", {}), current.get("python_calls", {}))
    return [f"{name}: {what}: {changed}" for what, changed in (("op histogram", where), ("Python calls", calls))
            if changed]


def _structure_changes(name: str, new_structure: Mapping, old_structure: Mapping) -> list[str]:
    changes = []
    for key in sorted(set(old_structure) | set(new_structure)):
        if key == "stages" and any(k != "stages" and old_structure.get(k) != new_structure.get(k)
                                   for k in old_structure):
            continue  # a named fact already says what changed in the stages
        old, new = old_structure.get(key), new_structure.get(key)
        if old != new:
            changes.append(f"{name}: {key.replace('_', ' ')}: {_short(old)} -> {_short(new)}")
    return changes


def _figure_line(name, figure, old, new, where: str, tolerance: float) -> tuple[str | None, bool]:
    words = FIGURE_WORDS.get(figure, figure.replace("_", " "))
    suffix = f" ({where})" if where else ""
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
