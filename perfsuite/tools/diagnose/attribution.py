"""Two --pipeline stages that read the pipeline's structure by measuring it: the bottleneck (the pipeline cut
after each stage, every prefix's rate in interleaved rounds, each stage's share of the time per sample) and
the fixes (each fix perfsuite can apply, rewrite.applicable_fixes, measured before and after in interleaved
rounds). Every iterator is drained before each round (streams: steady state, not a buffer)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from perfsuite.measure.rounds import alternating
from perfsuite.records import Record
from perfsuite.tools.diagnose import rewrite
from perfsuite.tools.diagnose.plan import TARGET_ROUNDS, Stage, status_of
from perfsuite.tools.diagnose.streams import Stream, buffered_elements, timed_next
from perfsuite.verdict.diagnosis_figures import MIN_ROUNDS, RoundsEstimate, estimate

MIN_READ_S = 0.05  # a prefix or fix read for at least this long per round ...
MIN_READS = 2  # ... and at least this many reads
UNBATCHED_READ = 32  # elements of an unbatched prefix counted per read, batched in TensorFlow (no Python per element)
GAIN_BOUNDARIES = (1.0,)  # a fix's gain is decided when its interval leaves 1.0 (no change) out


@dataclass(frozen=True)
class StageShare(Record):
    """One stage of the pipeline: its words, the rate of the pipeline cut after it (samples/s) and the
    share of the whole pipeline's time per sample it adds (per round: its prefix's seconds per sample minus
    the previous prefix's, over the last prefix's)."""

    stage: str
    rate: RoundsEstimate
    share: RoundsEstimate


@dataclass(frozen=True)
class Bottleneck(Record):
    """The stages in order and the one that limits throughput (the largest share), decided when its share's
    interval lies above every other stage's."""

    stages: tuple[StageShare, ...]
    limiting: str | None
    decided: bool


@dataclass(frozen=True)
class FixGain(Record):
    """A fix measured: its name and words, what was compared (units: 'samples/s of the pipeline' or 'steps/s
    of the step fed by it'), and the per-round after/before ratio; applied False with why when it was not."""

    name: str
    words: str
    applied: bool
    why: str | None = None
    unit: str | None = None
    gain: RoundsEstimate | None = None


def counted(dataset, *, batched: bool):
    """dataset as the samples each element holds (its leading dimension when batched, else 1), unbatched
    elements batched UNBATCHED_READ at a time: a prefix is read inside TensorFlow, as the pipeline reads it,
    without Python's cost per element or the copy of its tensors to the host."""
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()

    def samples(*element):
        if not batched:
            return tf.constant(1, tf.int64)
        return tf.cast(tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0], tf.int64)

    counts = dataset.map(samples)
    return counts if batched else counts.batch(UNBATCHED_READ)


def _read_rate(stream: Stream, *, drain: int, read_s: float, batched: bool) -> float:
    """Samples per second from a counted() stream after drain of its elements untimed, read for read_s
    seconds."""
    stream.drain(drain if batched else -(-drain // UNBATCHED_READ))
    samples, spent, reads = 0, 0.0, 0
    while spent < read_s or reads < MIN_READS:
        element, seconds = timed_next(stream)
        samples += int(element.numpy().sum())
        spent += seconds
        reads += 1
    return samples / spent


def bottleneck_stage(stage: Stage, dataset, spec: str, *, warmup: int) -> Bottleneck | None:
    """The prefixes of dataset (rewrite.prefixes), each read in every round in alternating order until the
    limiting stage is decided or the share is spent."""
    cuts = rewrite.prefixes(dataset)
    if len(cuts) < 2:
        stage.plan = "one stage only: nothing to attribute"
        stage.tell("note", stage.plan)
        return None
    read_s = max(MIN_READ_S, stage.left_s() / (TARGET_ROUNDS * len(cuts) * 2))
    stage.plan = (f"{len(cuts)} prefixes ({', '.join(c.stage for c in cuts)}), each drained then read for "
                  f"{read_s:.2f} s per round, interleaved, until the limiting stage is decided")
    stage.tell("note", stage.plan)
    streams = {index: Stream(counted(cut.dataset, batched=cut.batched), spec) for index, cut in enumerate(cuts)}
    drains = {index: warmup + buffered_elements(cut.dataset) for index, cut in enumerate(cuts)}
    rates: dict[int, list[float]] = {index: [] for index in streams}

    def one_round(index: int) -> None:
        for cut in alternating(tuple(streams), index):
            rates[cut].append(_read_rate(streams[cut], drain=drains[cut], read_s=read_s, batched=cuts[cut].batched))

    outcome = stage.rounds_until_decided(one_round, decided=lambda: _bottleneck(cuts, rates).decided,
                                         first_estimate_s=2 * read_s * len(cuts))
    for stream in streams.values():
        stream.close()
    stage.status = status_of(outcome)
    return _bottleneck(cuts, rates) if rates[0] else None


def _bottleneck(cuts, rates: dict[int, list[float]]) -> Bottleneck:
    rounds = len(rates[0])
    if not rounds:
        return Bottleneck(stages=(), limiting=None, decided=False)
    per_sample = [[1 / rates[i][r] for i in range(len(cuts))] for r in range(rounds)]
    shares = {i: [(row[i] - (row[i - 1] if i else 0.0)) / row[-1] for row in per_sample] for i in range(len(cuts))}
    stages = tuple(StageShare(stage=cut.stage, rate=estimate(rates[i]), share=estimate(shares[i]))
                   for i, cut in enumerate(cuts))
    top = max(range(len(stages)), key=lambda i: stages[i].share.median)
    decided = rounds >= MIN_ROUNDS and all(stages[top].share.low > s.share.high for i, s in enumerate(stages)
                                           if i != top)
    return Bottleneck(stages=stages, limiting=stages[top].stage, decided=decided)


def fixes_stage(stage: Stage, dataset, spec: str, *, warmup: int, ends_with_prefetch: bool,
                step: Callable | None) -> tuple[FixGain, ...]:
    """Each applicable fix against the pipeline as it is, in rounds alternating before and after, until every
    gain is decided or the share is spent. With a step, the figure is the step fed by each (a fresh iterator
    per side and round, warm-up step calls untimed); without, the pipeline alone (drained before each round)."""
    try:
        fixes, skipped = rewrite.applicable_fixes(dataset, ends_with_prefetch=ends_with_prefetch)
    except Exception as error:  # noqa: BLE001 -- a graph perfsuite cannot rewrite: said, not raised
        fixes, skipped = [], [rewrite.NotApplied("all", f"the graph could not be read for rewriting: {error}")]
    out = [FixGain(name=s.name, words=s.name, applied=False, why=s.why) for s in skipped]
    if not fixes:
        stage.plan = "no fix perfsuite can apply"
        stage.tell("note", stage.plan)
        return tuple(out)
    share_s = stage.left_s() / len(fixes)
    stage.plan = f"{len(fixes)} fix(es) ({', '.join(f.name for f in fixes)}), before and after in alternating rounds"
    stage.tell("note", stage.plan)
    statuses = []
    for fix in fixes:
        gain, status = _measure_fix(stage, fix, dataset, spec, warmup=warmup, step=step, share_s=share_s)
        out.append(gain)
        statuses.append(status)
        share_s = max(share_s, stage.left_s() / max(1, len(fixes) - len(statuses)))
    from perfsuite.tools.diagnose.plan import worst_status

    stage.status = worst_status(statuses)
    return tuple(out)


def _measure_fix(stage: Stage, fix: rewrite.Fix, dataset, spec: str, *, warmup: int, step: Callable | None,
                 share_s: float) -> tuple[FixGain, str]:
    try:
        fixed, ready = fix.build(dataset)
        ready()
    except Exception as error:  # noqa: BLE001 -- a rewrite TensorFlow refuses: said, not raised
        return FixGain(name=fix.name, words=fix.words, applied=False, why=f"the rewrite failed: {error}"), "done"
    sides = {"before": dataset, "after": fixed}
    values: dict[str, list[float]] = {"before": [], "after": []}
    read_s = max(MIN_READ_S, share_s / (TARGET_ROUNDS * 4))
    if step is None:
        streams = {name: Stream(counted(data, batched=True), spec) for name, data in sides.items()}
        drains = {name: warmup + buffered_elements(data) for name, data in sides.items()}

        def run(name: str) -> float:
            return _read_rate(streams[name], drain=drains[name], read_s=read_s, batched=True)
    else:
        streams = {}

        def run(name: str) -> float:
            return _steps_per_s(step, sides[name], spec, warmup=warmup, read_s=read_s)

    def one_round(index: int) -> None:
        for name in alternating(("before", "after"), index):
            values[name].append(run(name))

    def gain() -> RoundsEstimate:
        return estimate([a / b for a, b in zip(values["after"], values["before"])], GAIN_BOUNDARIES)

    outcome = stage.rounds_until_decided(one_round, decided=lambda: gain().decided, share_s=share_s,
                                         first_estimate_s=4 * read_s, what=f"{fix.name}: ")
    for stream in streams.values():
        stream.close()
    unit = "samples/s of the pipeline" if step is None else "steps/s of the step fed by the pipeline"
    return (FixGain(name=fix.name, words=fix.words, applied=True, unit=unit,
                    gain=gain() if values["after"] else None), status_of(outcome))


def _steps_per_s(step: Callable, dataset, spec: str, *, warmup: int, read_s: float) -> float:
    """Steps per second of step (it reads its output back itself) fed by a fresh iterator of dataset, warmup
    calls untimed, then calls for at least read_s seconds (at least MIN_READS)."""
    stream = Stream(dataset, spec)
    for _ in range(warmup):
        step(stream.next())
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < read_s or calls < MIN_READS:
        step(stream.next())
        calls += 1
    seconds = time.perf_counter() - start
    stream.close()
    return calls / seconds
