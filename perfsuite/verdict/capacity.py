"""How many cores keep an accelerator fed: the capacity model of a tf.data pipeline, pure (no TensorFlow), its
record (the `capacity` section of a diagnosis) and its findings in words. The measuring stage is
tools/diagnose/capacity.py.

The model (Plumber, Kuchnik et al., MLSys 2022). Stage i costs cost_i seconds of one thread per element it
produces (of which cpu_i on a core: less where the stage waits, a sleep, I/O) and produces elements_per_sample_i
elements per sample (1 before batching, 1/B after a batch of B), so per sample it holds a thread s_i = cost_i x
elements_per_sample_i and a core u_i = cpu_i x elements_per_sample_i (u_i = s_i where no CPU figure is given); a stage
whose output a completed cache serves costs 0 in steady state. On K cores the pipeline's throughput X (samples/s) is
the largest X with

    X * sum_i u_i <= K           the cores, shared by every stage;
    X * sum_{i in g} s_i <= 1    each thread g of sequential stages (one element at a time; sequential stages
                                 chained with no buffer or parallel stage between them run on one thread);
    X * s_i <= p_i               a stage of p_i fixed parallel calls.

Plumber's linear program gives each stage c_i cores with c_i / u_i >= X and sum_i c_i <= K (a sequential stage's
thread time X s_i <= 1); at its optimum c_i = X u_i, which is the program above. Every constraint there is X a <= b
with a >= 0 and b > 0, so the feasible X form the interval [0, min b / a]: the closed form

    X = min(K / sum_i u_i,  min_g 1 / sum_{i in g} s_i,  min_i p_i / s_i)

is the program's exact optimum (not an approximation, not a greedy), and ceiling() computes it. The split that
reaches it gives stage i c_i = X u_i cores and ceil(X s_i) parallel calls (threads busy) where it is parallel
(split()). "To feed a step
of T s at batch B" the pipeline must give B / T samples/s: the smallest integer K whose ceiling reaches that
(cores_needed()), none where a thread or fixed calls cap the pipeline below it whatever the cores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from perfsuite.records import Record
from perfsuite.verdict.diagnosis_figures import DiagnosisFinding, RoundsEstimate
from perfsuite.workload.op_table import SEQUENTIAL_MAP_OP

CAPACITY_MARGIN = 0.20  # the model's stated margin: its two-core prediction within +-20 % of the measured rate
CHECK_BOUNDARIES = (1 - CAPACITY_MARGIN, 1 + CAPACITY_MARGIN)  # on predicted / measured, per round
CHECK_CORES = 2  # the check: the pipeline on two cores, predicted from measurements confined to one
PLOT_MIN_CORES = 8  # the report's curve runs to at least this many cores
_TOLERANCE = 1e-9  # relative: a ceiling this close to a need meets it (floating-point sums of exact costs)


# ------------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class StageCost(Record):
    """One stage as the model takes it. cost_s: seconds of one thread per element it produces (cost_low_s,
    cost_high_s: its interval, where measured); cpu_s: of those, the core-seconds (None: all of them; less where
    the stage waits: a sleep, I/O); elements_per_sample: elements it produces per sample; calls: the parallel calls it
    can run at once (1: sequential; p: fixed; None: as many as there are cores, AUTOTUNE); thread: sequential stages
    with the same thread run on one thread (None: a thread of its own); cached: served by a completed cache."""

    stage: str
    cost_s: float
    elements_per_sample: float = 1.0
    calls: int | None = 1
    thread: int | None = None
    cached: bool = False
    cost_low_s: float | None = None
    cost_high_s: float | None = None
    cpu_s: float | None = None

    def __post_init__(self):
        for name in ("cost_s", "cost_low_s", "cost_high_s", "cpu_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise self.invalid((name,), "core-seconds >= 0", repr(value))
        if not (math.isfinite(self.elements_per_sample) and self.elements_per_sample > 0):
            raise self.invalid(("elements_per_sample",), "a number > 0", repr(self.elements_per_sample))
        if self.calls is not None and self.calls < 1:
            raise self.invalid(("calls",), "an integer >= 1 or None (as many as the cores)", repr(self.calls))

    @property
    def sequential(self) -> bool:
        return self.calls == 1

    def per_sample_s(self) -> float:
        """Seconds of a thread per sample in steady state (0 when a cache serves it)."""
        return 0.0 if self.cached else self.cost_s * self.elements_per_sample

    def core_per_sample_s(self) -> float:
        """Core-seconds per sample in steady state (0 when a cache serves it)."""
        return 0.0 if self.cached else (self.cost_s if self.cpu_s is None else self.cpu_s) * self.elements_per_sample

    def at(self, end: str) -> StageCost:
        """The stage at one end of its cost interval ('low' or 'high'; its median where none was measured)."""
        value = self.cost_low_s if end == "low" else self.cost_high_s
        if value is None:
            return self
        cpu = self.cpu_s if self.cpu_s is None or not self.cost_s else self.cpu_s * value / self.cost_s
        return replace(self, cost_s=value, cpu_s=cpu)


@dataclass(frozen=True)
class Bound:
    """One constraint of the program as a ceiling on X (samples/s) and what it is, in words."""

    samples_per_s: float
    what: str
    cores: bool  # the cores' bound (moves with K) or a cap (a thread, fixed calls: does not)


def bounds(stages: Sequence[StageCost], cores: float) -> list[Bound]:
    """Every constraint's ceiling on X on `cores` cores: the cores first, then each thread of sequential stages and
    each stage of fixed parallel calls that costs anything (inf: nothing costs)."""
    total = sum(stage.core_per_sample_s() for stage in stages)
    out = [Bound(cores / total if total > 0 else math.inf, f"the {cores:g} core(s)", True)]
    threads: dict = {}
    for index, stage in enumerate(stages):
        if stage.sequential:
            threads.setdefault(("own", index) if stage.thread is None else stage.thread, []).append(stage)
        elif stage.calls is not None and stage.per_sample_s() > 0:
            out.append(Bound(stage.calls / stage.per_sample_s(), f"{stage.stage}'s {stage.calls} parallel calls",
                             False))
    for members in threads.values():
        load = sum(stage.per_sample_s() for stage in members)
        if load > 0:
            names = " + ".join(stage.stage for stage in members)
            out.append(Bound(1 / load, f"the one thread of {names}" if len(members) == 1 else
                             f"the one thread {names} share", False))
    return out


def ceiling(stages: Sequence[StageCost], cores: float) -> float:
    """The pipeline's most samples/s on `cores` cores: the linear program's exact optimum (module docstring)."""
    if not cores > 0:
        raise ValueError(f"cores: expected a number > 0, found {cores!r}")
    return min(bound.samples_per_s for bound in bounds(stages, cores))


def limited_by(stages: Sequence[StageCost], cores: float) -> Bound:
    """The constraint that sets the ceiling on `cores` cores (a cap before the cores where they tie)."""
    found = bounds(stages, cores)
    top = min(bound.samples_per_s for bound in found)
    return next(b for b in sorted(found, key=lambda b: b.cores) if b.samples_per_s <= top * (1 + _TOLERANCE))


def cap(stages: Sequence[StageCost]) -> Bound | None:
    """The ceiling no number of cores lifts (the tightest thread or fixed calls); None: more cores always help."""
    caps = [bound for bound in bounds(stages, 1) if not bound.cores]
    return min(caps, key=lambda bound: bound.samples_per_s) if caps else None


@dataclass(frozen=True)
class StageSplit:
    """A stage's part of the cores at the ceiling, and the parallel calls that give it (1 for a sequential one)."""

    stage: str
    cores: float
    calls: int


def split(stages: Sequence[StageCost], cores: float) -> tuple[StageSplit, ...]:
    """The split of `cores` that reaches the ceiling: c_i = X u_i cores per stage, and ceil(X s_i) calls (the
    threads it keeps busy, at least 1) for a parallel stage, 1 for a sequential one. With nothing costing, every
    stage no cores and 1 call."""
    top = ceiling(stages, cores)
    out = []
    for stage in stages:
        share = 0.0 if math.isinf(top) else top * stage.core_per_sample_s()
        busy = 0.0 if math.isinf(top) else top * stage.per_sample_s()
        calls = 1 if stage.sequential else max(1, math.ceil(busy * (1 - _TOLERANCE)))
        if stage.calls is not None:
            calls = min(calls, stage.calls)
        out.append(StageSplit(stage.stage, share, calls))
    return tuple(out)


def cores_needed(stages: Sequence[StageCost], samples_per_s: float) -> int | None:
    """The smallest integer K >= 1 whose ceiling reaches samples_per_s; None when a cap (a thread of sequential
    stages, fixed parallel calls) holds the pipeline below it whatever the cores."""
    if not samples_per_s > 0:
        raise ValueError(f"samples_per_s: expected a rate > 0, found {samples_per_s!r}")
    limit = cap(stages)
    if limit is not None and limit.samples_per_s < samples_per_s * (1 - _TOLERANCE):
        return None
    total = sum(stage.core_per_sample_s() for stage in stages)
    cores = max(1, math.ceil(samples_per_s * total * (1 - _TOLERANCE)))
    while ceiling(stages, cores) < samples_per_s * (1 - _TOLERANCE):  # floating point only: at most a step
        cores += 1
    return cores


def without_call_limits(stages: Sequence[StageCost]) -> tuple[StageCost, ...]:
    """The stages with every parallel stage free to use as many calls as there are cores (the split's rewrite
    sets them); sequential stages stay sequential."""
    return tuple(stage if stage.sequential else replace(stage, calls=None) for stage in stages)


# ------------------------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class AutotuneNode(Record):
    """One node of tf.data's own autotuning model of the iterator (its ModelProto), from the source to the output:
    its name as tf.data runs it ('ParallelMapV2', 'MapAndBatch' where its optimizer fused two stages), whether
    it is autotuned, each parameter as the iterator used it, those the autotuner tunes, and the stage it is."""

    name: str
    autotune: bool
    parameters: dict[str, float]
    tunable: tuple[str, ...] = ()
    stage: str | None = None

    def words(self) -> str:
        values = ", ".join(f"{name} {value:g}" + (" (autotuned)" if name in self.tunable else " (fixed)")
                           for name, value in self.parameters.items())
        return f"{self.name}: {values}" if values else self.name


@dataclass(frozen=True)
class CapacityStage(Record):
    """A stage as measured and modelled: its words, graph node and op; its cost (seconds of one thread per element
    it produces, over the rounds; None before a round) and cpu (of those, core-seconds: less where it waits);
    elements it produces per sample; its parallel calls (1: sequential, None: AUTOTUNE) and why (parallel_by); the
    thread it shares; whether a completed cache serves it; the split's cores and calls on this machine's cores;
    and what AUTOTUNE used for it on this run."""

    stage: str
    node: str | None
    op: str | None
    cost: RoundsEstimate | None
    elements_per_sample: float
    calls: int | None
    parallel_by: str
    thread: int | None = None
    cached: bool = False
    split_cores: float | None = None
    split_calls: int | None = None
    autotune: AutotuneNode | None = None
    cpu: RoundsEstimate | None = None

    def model(self) -> StageCost:
        """The model's stage at the median cost (negative medians, noise on a stage that costs nothing, as 0)."""
        cost = self.cost
        return StageCost(stage=self.stage, cost_s=max(cost.median, 0.0) if cost else 0.0,
                         cost_low_s=max(cost.low, 0.0) if cost else None,
                         cost_high_s=max(cost.high, 0.0) if cost else None,
                         cpu_s=max(self.cpu.median, 0.0) if self.cpu else None,
                         elements_per_sample=self.elements_per_sample, calls=self.calls, thread=self.thread,
                         cached=self.cached)


@dataclass(frozen=True)
class CapacityFigures(Record):
    """The capacity section of a diagnosis. method: how the costs were measured; cores: this machine's
    usable cores; predicted_2core and measured_2core: samples/s per round (the model on the one-core measurements,
    and the pipeline as written on two cores, from the same rounds); check: predicted / measured per round against
    CHECK_BOUNDARIES; check_how: how both sides were taken; cpu_per_wall: process CPU seconds per wall second of
    the whole pipeline confined to one core (1: truly confined), cpu_per_wall_2core: the same of the two-core side,
    cpu_per_sample_ratio: its process CPU per sample over the confined pipeline's, per round (above 1: running on
    two cores costs more CPU per sample, hand-offs between threads, which one-core costs do not hold); autotune:
    tf.data's own model of the as-written iterator and autotune_source how it was read or why not; the need:
    step_s (seconds per batch) from step_source, batch (samples per batch), need_samples_per_s, cores_needed (None:
    no K suffices, or no step, cores_needed_why says which); target_cores: --cores, the machine the user trains
    on."""

    method: str
    stages: tuple[CapacityStage, ...]
    cores: int
    predicted_2core: RoundsEstimate | None
    measured_2core: RoundsEstimate | None
    check: RoundsEstimate | None
    check_how: str
    margin: float = CAPACITY_MARGIN
    cpu_per_wall: RoundsEstimate | None = None
    cpu_per_wall_2core: RoundsEstimate | None = None
    cpu_per_sample_ratio: RoundsEstimate | None = None
    autotune: tuple[AutotuneNode, ...] = ()
    autotune_source: str = ""
    target_cores: int | None = None
    step_s: float | None = None
    step_source: str | None = None
    batch: int | None = None
    need_samples_per_s: float | None = None
    cores_needed: int | None = None
    cores_needed_why: str | None = None
    cores_needed_parallel_maps: int | None = None  # where no K suffices as written: with its plain maps parallel

    def models(self) -> tuple[StageCost, ...]:
        return tuple(stage.model() for stage in self.stages)

    def parallel_maps(self) -> tuple[StageCost, ...]:
        """The model with every plain map parallel (num_parallel_calls=AUTOTUNE: what the map-parallelism fix
        does); the sequential stages around it keep their thread."""
        return tuple(replace(model, calls=None) if stage.op == SEQUENTIAL_MAP_OP else model
                     for stage, model in zip(self.stages, self.models()))

    def ceiling(self, cores: float, end: str | None = None) -> float:
        """The model's ceiling on `cores` cores at the median costs (end 'low' / 'high': the interval's ends)."""
        models = self.models()
        if end is not None:
            models = tuple(m.at("high" if end == "low" else "low") for m in models)  # dearer stages, lower ceiling
        return ceiling(models, cores)

    def check_state(self) -> str | None:
        """'within' (the whole interval of predicted / measured inside the margin), 'misses' (outside it),
        'undecided', or None (no check)."""
        check = self.check
        if check is None:
            return None
        if not check.decided:
            return "undecided"
        low, high = CHECK_BOUNDARIES
        return "within" if low <= check.median <= high else "misses"


def with_need(figures: CapacityFigures | None, *, step_s: float | None, step_source: str | None,
              batch: int | None) -> CapacityFigures | None:
    """figures with the step's need (batch / step_s samples/s) and the cores that meet it, or why none is said."""
    if figures is None:
        return None
    found = {"step_s": step_s, "step_source": step_source, "batch": batch}
    if step_s is None or not step_s > 0 or not batch:
        why = "no step time to feed: --step-time SECONDS or --step gives one" if step_s is None else \
            "batches without a leading dimension: samples per batch unknown"
        return replace(figures, **found, need_samples_per_s=None, cores_needed=None, cores_needed_why=why)
    need = batch / step_s
    models = figures.models()
    if all(m.core_per_sample_s() == 0 for m in models):
        return replace(figures, **found, need_samples_per_s=need, cores_needed=None,
                       cores_needed_why="no stage measured a cost: nothing to size the cores by")
    needed = cores_needed(models, need)
    why, parallel = None, None
    if needed is None:
        limit = cap(models)
        why = (f"no number of cores suffices: {limit.what} caps the pipeline at {_rate(limit.samples_per_s)} "
               f"samples/s, below the {_rate(need)} samples/s the step needs")
        loosened = figures.parallel_maps()
        if loosened != models:
            parallel = cores_needed(loosened, need)
            still = cap(loosened)
            why += (f"; with its plain map(s) parallel (num_parallel_calls=AUTOTUNE) about {parallel} core(s)"
                    if parallel is not None else
                    f"; with its plain map(s) parallel, {still.what} would still cap it, at "
                    f"{_rate(still.samples_per_s)} samples/s")
    return replace(figures, **found, need_samples_per_s=need, cores_needed=needed, cores_needed_why=why,
                   cores_needed_parallel_maps=parallel)


# ----------------------------------------------------------------------------------------- in words


def _rate(value: float) -> str:
    return "unbounded" if math.isinf(value) else f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def check_words(figures: CapacityFigures) -> str:
    """The check in words: both figures, the error and whether it is within the margin."""
    predicted, measured, check = figures.predicted_2core, figures.measured_2core, figures.check
    if predicted is None or measured is None or check is None:
        return f"the {CHECK_CORES}-core check was not measured: {figures.check_how}"
    error = check.median - 1
    state = {"within": f"within the model's ±{figures.margin:.0%}",
             "misses": f"beyond the model's ±{figures.margin:.0%}",
             "undecided": f"undecided against ±{figures.margin:.0%} (its interval {check.low - 1:+.0%} to "
                          f"{check.high - 1:+.0%} straddles it)"}[figures.check_state()]
    return (f"{CHECK_CORES}-core throughput predicted from 1-core measurements {_rate(predicted.median)} samples/s, "
            f"measured as written {_rate(measured.median)}: error {error:+.0%} [{check.low - 1:+.0%}, "
            f"{check.high - 1:+.0%}] over {check.rounds} paired rounds, {state}{miss_words(figures)}")


def miss_words(figures: CapacityFigures) -> str:
    """Where the check misses, what the process CPU figures say of why (nothing where they say nothing)."""
    state, check = figures.check_state(), figures.check
    busy, ratio, confined = figures.cpu_per_wall_2core, figures.cpu_per_sample_ratio, figures.cpu_per_wall
    if state != "misses" or busy is None or ratio is None:
        return ""
    if check.median > 1 and ratio.median >= 1 + figures.margin:
        return (f"; as written it kept {busy.median:.2f} of {CHECK_CORES} cores busy and spent {ratio.median:.2f}x "
                "the CPU per sample it spent confined to one core: running on several threads costs this pipeline "
                "more per sample (hand-offs between threads, threads spinning while they wait), which costs measured "
                "on one core do not hold")
    if check.median > 1 and busy.median < CHECK_CORES * (1 - figures.margin):
        return (f"; as written it kept only {busy.median:.2f} of {CHECK_CORES} cores busy: it waits (on hand-offs "
                "between its threads, or on I/O) rather than on cores")
    if check.median < 1 and confined is not None and confined.median > 1 + figures.margin:
        return (f"; confined to one core it still used {confined.median:.2f} cores (work outside tf.data's function "
                "runner overlapped), so its costs read low")
    return ""


def need_words(figures: CapacityFigures) -> str:
    """'to feed a step of T ms at batch B you need about K cores' (or why not)."""
    if figures.need_samples_per_s is None:
        return f"cores needed: not said ({figures.cores_needed_why})"
    step = (f"to feed a step of {_ms(figures.step_s)} ms ({figures.step_source}) at batch {figures.batch} "
            f"({_rate(figures.need_samples_per_s)} samples/s)")
    if figures.cores_needed is None:
        return f"{step}: {figures.cores_needed_why}"
    models = figures.models()
    here = ceiling(models, figures.cores)
    return (f"{step} you need about {figures.cores_needed} core(s) for this pipeline as written (its stages reach "
            f"{_rate(here)} samples/s on this machine's {figures.cores} by the model, limited by "
            f"{limited_by(models, figures.cores).what}; the training loop's own reading not counted)")


def target_words(figures: CapacityFigures) -> str | None:
    """The machine the user trains on (--cores K): the ceiling and the split there."""
    if figures.target_cores is None:
        return None
    cores = figures.target_cores
    free = without_call_limits(figures.models())
    parts = ", ".join(f"{part.stage} {part.calls}" for part, stage in zip(split(free, cores), free)
                      if not stage.sequential)
    return (f"on {cores} cores (--cores): {_rate(figures.ceiling(cores))} samples/s as written "
            f"[{_rate(figures.ceiling(cores, 'low'))}, {_rate(figures.ceiling(cores, 'high'))}], limited by "
            f"{limited_by(figures.models(), cores).what}; with the split's parallel calls "
            f"({parts or 'no parallel stage'}) {_rate(ceiling(free, cores))} samples/s")


def change_first_lines(figures: CapacityFigures | None) -> list[str]:
    """The capacity lines under 'what to change first': the check first where the model missed it (its figures
    then rest on a model that did not hold here), the cores needed, the target machine's ceiling."""
    if figures is None:
        return []
    lines = []
    if figures.check_state() == "misses":
        lines.append(f"capacity model MISSED its check: {check_words(figures)}; the cores-needed figure below "
                     "rests on it")
    lines.append(f"cores: {need_words(figures)}")
    target = target_words(figures)
    if target:
        lines.append(f"cores: {target}")
    if figures.check_state() != "misses":
        lines.append(f"cores: model checked: {check_words(figures)}")
    return lines


def capacity_verdicts(figures: CapacityFigures | None) -> list[DiagnosisFinding]:
    """The check (first where the model missed it), the stages' costs with the split, and AUTOTUNE's choices."""
    if figures is None:
        return []
    check = DiagnosisFinding("capacity-check", check_words(figures),
                             {"predicted_2core": None if figures.predicted_2core is None
                              else figures.predicted_2core.median,
                              "measured_2core": None if figures.measured_2core is None
                              else figures.measured_2core.median, "how": figures.check_how}, None, figures.check)
    models = figures.models()
    costs = "; ".join(
        f"{s.stage} {_ms(s.cost.median)} [{_ms(s.cost.low)}, {_ms(s.cost.high)}] ms of a thread per "
        f"{'batch' if s.elements_per_sample < 1 else 'element'}"
        + (f" ({_ms(s.cpu.median)} of them on a core: it waits the rest)"
           if s.cpu is not None and s.cpu.median < 0.9 * s.cost.median and s.cost.median > 0 else "")
        + f", {_calls_words(s)}"
        + (", served by a cache" if s.cached else "") + (f", split {s.split_calls}" if s.split_calls else "")
        for s in figures.stages if s.cost is not None)
    here = ceiling(models, figures.cores) if models else math.inf
    evidence = {"cores": figures.cores, "ceiling_here": None if math.isinf(here) else here,
                "cores_needed": figures.cores_needed, "method": figures.method}
    model = DiagnosisFinding("capacity", f"{need_words(figures)}; stage costs: {costs or 'none measured'} "
                             f"(measured by {figures.method})", evidence, None)
    chosen = "; ".join(node.words() + (f" [{node.stage}]" if node.stage else "")
                       for node in figures.autotune if node.parameters)
    autotune = DiagnosisFinding("autotune", f"what AUTOTUNE chose on this run ({figures.autotune_source}): "
                                f"{chosen or 'no tunable parameter in the iterator'}" if figures.autotune else
                                f"what AUTOTUNE chose on this run: {figures.autotune_source}",
                                {"nodes": [node.name for node in figures.autotune]}, None)
    found = [model, autotune]
    return [check, *found] if figures.check_state() == "misses" else [*found, check]


def _calls_words(stage: CapacityStage) -> str:
    calls = "sequential" if stage.calls == 1 else "AUTOTUNE" if stage.calls is None else f"{stage.calls} calls"
    return calls + (f" ({stage.parallel_by})" if stage.parallel_by else "")
