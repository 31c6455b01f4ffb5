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
from perfsuite.verdict.diagnosis import estimate_evidence, why_undecided
from perfsuite.verdict.diagnosis_figures import (
    DECIDED,
    DONE,
    MIN_ROUNDS,
    TOO_SHORT,
    UNDECIDED,
    DiagnosisFinding,
    RoundsEstimate,
    estimate,
)

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
    elements counted UNBATCHED_READ at a time: a prefix is read inside TensorFlow, one element at a time as
    the stage after it reads it, without Python's cost per element or the copy of its tensors to the host."""
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()

    def samples(*element):
        if not batched:
            return tf.constant(1, tf.int64)
        return tf.cast(tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0], tf.int64)

    if batched:
        counts = dataset.map(samples)
    else:  # a scan, not a map: tf.data would fuse a map with the batch after it and call the prefix from threads
        counts = dataset.scan(tf.constant(0, tf.int64), lambda state, *element: (state, tf.constant(1, tf.int64)))
        counts = counts.batch(UNBATCHED_READ)
    options = tf.data.Options()  # no prefetch injected after the count: it would fill while the prefix sits idle
    options.experimental_optimization.inject_prefetch = False
    return counts.with_options(options)


def _read_rate(stream: Stream, *, drain: int, read_s: float, batched: bool) -> float:
    """Samples per second from a counted() stream after drain of its reads untimed, read for read_s
    seconds."""
    stream.drain(drain)
    samples, spent, reads = 0, 0.0, 0
    while spent < read_s or reads < MIN_READS:
        element, seconds = timed_next(stream)
        samples += int(element.numpy().sum())
        spent += seconds
        reads += 1
    return samples / spent


class BottleneckRounds:
    """The prefixes of dataset (rewrite.prefixes), each read in every round in alternating order until the
    limiting stage is decided or the share is spent. run() again adds rounds to the earlier ones (fresh
    iterators, started and drained before the rounds)."""

    def __init__(self, dataset, spec: str, *, warmup: int):
        self.cuts = rewrite.prefixes(dataset)
        self.spec, self.warmup = spec, warmup
        self.rates: dict[int, list[float]] = {index: [] for index in range(len(self.cuts))}

    def figures(self) -> Bottleneck | None:
        return _bottleneck(self.cuts, self.rates) if self.rates and self.rates[0] else None

    def run(self, stage: Stage) -> Bottleneck | None:
        cuts, rates = self.cuts, self.rates
        if len(cuts) < 2:
            stage.plan = "one stage only: nothing to attribute"
            stage.tell("note", stage.plan)
            return None
        read_s = max(MIN_READ_S, stage.left_s() / (TARGET_ROUNDS * len(cuts) * 2))
        if stage.left_s() < 2 * read_s * len(cuts) * MIN_ROUNDS:
            stage.plan = f"{len(cuts)} prefixes: no time left for {MIN_ROUNDS} rounds of them"
            stage.tell("note", stage.plan)
            stage.status = TOO_SHORT if len(rates[0]) < MIN_ROUNDS else UNDECIDED
            return self.figures()
        stage.plan = (f"{len(cuts)} prefixes ({', '.join(c.stage for c in cuts)}), each started and drained, then "
                      f"drained and read for {read_s:.2f} s per round, interleaved, until the limiting stage is "
                      "decided")
        stage.tell("note", stage.plan)
        started = time.perf_counter()
        sources = {index: counted(cut.dataset, batched=cut.batched) for index, cut in enumerate(cuts)}
        streams = {index: Stream(source, self.spec) for index, source in sources.items()}
        drains = {index: self.warmup + buffered_elements(source) for index, source in sources.items()}
        for index, stream in streams.items():  # the start-ups, before any round: a round's estimate holds none
            stream.drain(drains[index])
        start_s = time.perf_counter() - started

        def one_round(index: int) -> None:
            for cut in alternating(tuple(streams), len(rates[0])):
                rates[cut].append(_read_rate(streams[cut], drain=drains[cut], read_s=read_s,
                                             batched=cuts[cut].batched))

        stage.rounds_until_decided(one_round, decided=lambda: _bottleneck(cuts, rates).decided,
                                   first_estimate_s=2 * read_s * len(cuts) + start_s / 2)
        for stream in streams.values():
            stream.close()
        decided = _bottleneck(cuts, rates).decided
        stage.status = DECIDED if decided else (TOO_SHORT if len(rates[0]) < MIN_ROUNDS else UNDECIDED)
        return self.figures()


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
                step: Callable | None, layout=None, padding=None, samples_per_s: float | None = None
                ) -> tuple[FixGain, ...]:
    """Each applicable fix against the pipeline as it is, in rounds alternating before and after, until every
    gain is decided or the share is spent. With a step, the figure is the step fed by each (a fresh iterator
    per side and round, warm-up step calls untimed); without, the pipeline alone (drained before each round)."""
    try:
        fixes, skipped = rewrite.applicable_fixes(dataset, ends_with_prefetch=ends_with_prefetch,
                                                  samples_per_s=samples_per_s, fill_limit_s=stage.left_s() / 4)
    except Exception as error:  # noqa: BLE001 -- a graph perfsuite cannot rewrite: said, not raised
        fixes, skipped = [], [rewrite.NotApplied("all", f"the graph could not be read for rewriting: {error}")]
    out = [FixGain(name=s.name, words=s.name, applied=False, why=s.why) for s in skipped]
    trim = padding_fix if padding is not None and padding.beyond_longest > 0 else None
    count = len(fixes) + (trim is not None)
    if not count:
        stage.plan = "no fix perfsuite can apply"
        stage.tell("note", stage.plan)
        return tuple(out)
    share_s = stage.left_s() / count
    if share_s < 4 * MIN_READ_S * MIN_ROUNDS:
        stage.plan = f"{count} fix(es): no time left to measure them"
        stage.tell("note", stage.plan)
        stage.status = TOO_SHORT
        return tuple(out) + tuple(FixGain(name=f.name, words=f.words, applied=False, why="no time left to measure it")
                                  for f in fixes)
    names = [f.name for f in fixes] + (["padding"] if trim is not None else [])
    stage.plan = f"{count} fix(es) ({', '.join(names)}), before and after in alternating rounds"
    stage.tell("note", stage.plan)
    statuses = []
    if trim is not None:
        out.append(trim(stage, step, dataset, spec, layout=layout, padding=padding, warmup=warmup, share_s=share_s))
        statuses.append(DECIDED if out[-1].gain is not None and out[-1].gain.decided else
                        (UNDECIDED if out[-1].applied else DONE))
        share_s = max(share_s, stage.left_s() / max(1, count - 1))
    for fix in fixes:
        gain, status = _measure_fix(stage, fix, dataset, spec, warmup=warmup, step=step, share_s=share_s)
        out.append(gain)
        statuses.append(status)
        share_s = max(share_s, stage.left_s() / max(1, count - len(statuses)))
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
        sources = {name: counted(data, batched=True) for name, data in sides.items()}
        streams = {name: Stream(source, spec) for name, source in sources.items()}
        drains = {name: warmup + buffered_elements(source) for name, source in sources.items()}

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


# ------------------------------------------------------------------------- padding to each batch's longest

PADDING_BATCHES = 16  # batches taken from the pipeline once, fed to the step as padded and as trimmed


def replaced(batch, values: dict):
    """batch with the components at the given paths (batch_spec.leaves' paths) replaced."""
    def walk(item, path: str):
        if path in values:
            return values[path]
        if isinstance(item, dict):
            return {key: walk(item[key], f"{path}/{key}" if path else str(key)) for key in item}
        if isinstance(item, tuple | list):
            return type(item)(walk(x, f"{path}/{i}" if path else str(i)) for i, x in enumerate(item))
        return item

    return walk(batch, "")


def trimmed(batch, layout):
    """batch with its audio cut to its longest true clip (speech.canonical_batch's lengths) and its length
    tensor, when it has one, holding the true lengths."""
    from perfsuite._tensorflow import tensorflow
    from perfsuite.measure.speech import canonical_batch

    tf = tensorflow()
    canonical = canonical_batch(batch, layout)
    lengths = canonical["mel_len"]
    longest = int(max(lengths)) if len(lengths) else 0
    values = {layout.mel: tf.convert_to_tensor(canonical["mel"])[:, :max(longest, 1)]}
    if layout.mel_len is not None:
        given = dict(_leaves(batch))[layout.mel_len]
        values[layout.mel_len] = tf.cast(tf.convert_to_tensor(lengths), given.dtype)
    return replaced(batch, values)


def _leaves(batch):
    from perfsuite.measure.batch_spec import leaves

    return leaves(batch)


def padding_fix(stage: Stage, step: Callable | None, dataset, spec: str, *, layout, padding,
                warmup: int, share_s: float) -> FixGain:
    """The step on PADDING_BATCHES batches of the pipeline as they are padded vs each cut to its longest true
    clip (what padded_batch to the longest does; bucketing by length pads less still), in alternating rounds
    after a warm-up round (a tf.function step traces each new length once). Not applied without a step, an
    audio component with padding past each batch's longest, or when the step refuses the shorter batches."""
    name, words = "padding", "padding each batch to its longest clip instead of a fixed length"
    if step is None:
        return FixGain(name=name, words=words, applied=False, why="needs --step: the gain is the step's")
    if layout is None or layout.mel is None or layout.ragged or padding is None or padding.beyond_longest <= 0:
        return FixGain(name=name, words=words, applied=False,
                       why="no padding past each batch's longest clip was measured")
    stream = Stream(dataset, spec)
    padded = [stream.next() for _ in range(PADDING_BATCHES)]
    stream.close()
    try:
        cut = [trimmed(batch, layout) for batch in padded]
        step(cut[0])
    except Exception as error:  # noqa: BLE001 -- the user's step may refuse another length: said, not raised
        return FixGain(name=name, words=words, applied=False,
                       why=f"the step refused batches cut to their longest clip: {error}")
    sides = {"before": padded, "after": cut}
    values: dict[str, list[float]] = {"before": [], "after": []}

    def run(side: str) -> float:
        start = time.perf_counter()
        for batch in sides[side]:
            step(batch)
        return len(sides[side]) / (time.perf_counter() - start)

    def one_round(index: int) -> None:
        for side in alternating(("before", "after"), index):
            rate = run(side)
            if index >= 1:  # the first round is the warm-up: every length traced once
                values[side].append(rate)

    def gain() -> RoundsEstimate:
        return estimate([a / b for a, b in zip(values["after"], values["before"])], GAIN_BOUNDARIES)

    stage.rounds_until_decided(one_round, decided=lambda: bool(values["after"]) and gain().decided,
                               share_s=share_s, warmup_rounds=1, what="padding: ")
    return FixGain(name=name, words=words, applied=True, unit=f"steps/s of the step on {PADDING_BATCHES} of the "
                   "pipeline's batches", gain=gain() if values["after"] else None)


def bottleneck_verdicts(bottleneck: Bottleneck | None) -> list[DiagnosisFinding]:
    """The stage that limits throughput, with its share of the time per sample and its interval."""
    if bottleneck is None or not bottleneck.stages:
        return []
    shares = {s.stage: s.share for s in bottleneck.stages}
    listing = ", ".join(f"{s.stage} {s.share.median:.0%} [{s.share.low:.0%}, {s.share.high:.0%}]"
                        for s in bottleneck.stages)
    evidence = {"stages": [s.stage for s in bottleneck.stages],
                "shares": [s.share.median for s in bottleneck.stages],
                "rates": [s.rate.median for s in bottleneck.stages]}
    top = shares[bottleneck.limiting]
    if bottleneck.decided:
        return [DiagnosisFinding("bottleneck", f"{bottleneck.limiting} limits throughput: it adds {top.median:.0%} "
                                 f"[{top.low:.0%}, {top.high:.0%}] of the time per sample (over {top.rounds} rounds; "
                                 f"each stage's share: {listing})", evidence, None, top)]
    return [DiagnosisFinding("bottleneck", f"the limiting stage is undecided after {top.rounds} round(s): the shares' "
                             f"intervals overlap ({listing})", evidence, "a longer --budget separates them", top)]


def fix_verdicts(fixes: tuple[FixGain, ...]) -> list[DiagnosisFinding]:
    """Each fix measured (its gain and interval, or why it stays undecided), and each fix not applied, why."""
    out = []
    for fix in fixes:
        if not fix.applied:
            out.append(DiagnosisFinding(f"fix-{fix.name}", f"{fix.name}: not applied ({fix.why})", {"applied": False},
                                        None))
            continue
        if fix.gain is None:
            out.append(DiagnosisFinding(f"fix-{fix.name}", f"{fix.words}: applied, but no measured round fit the time "
                                        "left", {"applied": True}, "a longer --budget measures it"))
            continue
        gain = fix.gain
        figure = f"{gain.median:.2f}x [{gain.low:.2f}, {gain.high:.2f}] {fix.unit} over {gain.rounds} rounds"
        evidence = {**estimate_evidence("gain", gain), "applied": True, "unit": fix.unit}
        why = why_undecided(gain, lambda v: f"{v:.2f}x")
        if why:
            words = f"{fix.words}: {figure}; whether it helps is {why}"
            recommendation = None
        elif gain.low > 1.0:
            words, recommendation = f"{fix.words}: {figure}", f"apply it: {fix.words}"
        else:
            words, recommendation = f"{fix.words}: {figure}; it does not help here", None
        out.append(DiagnosisFinding(f"fix-{fix.name}", words, evidence, recommendation, gain))
    return out
