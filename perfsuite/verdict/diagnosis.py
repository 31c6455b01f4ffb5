"""The findings of a diagnosis in words (`perfsuite diagnose`): each topic's verdict from its figures, what
undecided means, and the recommendation; docs/diagnose.md says why each threshold."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from perfsuite.measure.batch_spec import BatchLayout
from perfsuite.measure.emulated import STEP_PRESETS
from perfsuite.measure.stats import MODERATELY_INPUT_BOUND, Cycle
from perfsuite.verdict import diagnosis_figures as fig
from perfsuite.verdict.diagnosis_figures import MATERIAL_GAIN, MIN_ROUNDS, DiagnosisFinding, RoundsEstimate

_times = "{:.2f}x".format
percent = "{:.0%}".format  # a share in words: '12%'


def why_undecided(figure: RoundsEstimate, fmt: Callable[[float], str] = fig.format_figure) -> str | None:
    """Why figure does not decide its class (too few rounds, a boundary in its interval); None if it does."""
    if figure.rounds < MIN_ROUNDS:
        return f"{fig.TOO_SHORT} ({figure.rounds} round(s); a decision needs {MIN_ROUNDS})"
    if figure.straddles:
        edges = " and ".join(fmt(b) for b in figure.straddles)
        return f"undecided: its interval {fmt(figure.low)}–{fmt(figure.high)} straddles the {edges} boundary"
    return None


def span_words(figure: RoundsEstimate, fmt: Callable[[float], str]) -> str:
    return f"interval {fmt(figure.low)}–{fmt(figure.high)} over {figure.rounds} rounds"


def estimate_evidence(name: str, figure: RoundsEstimate) -> dict:
    return {name: figure.median, f"{name}_low": figure.low, f"{name}_high": figure.high, "rounds": figure.rounds,
            "coverage": round(figure.coverage, 3)}


def data_verdicts(data: fig.DataSummary) -> list[DiagnosisFinding]:
    out = []
    if data.skipped:
        out.append(DiagnosisFinding("data", f"{data.skipped} unreadable file(s) skipped; measured on the rest",
                                    {"checked": data.checked, "skipped": data.skipped, "usable": data.usable},
                                    "fix or convert the files listed by `perfsuite check-data` (16-bit PCM mono at "
                                    "the expected sample rate); until then they are missing from training"))
    repeat = data.repeat
    if repeat.copies > 1:
        out.append(DiagnosisFinding(
            "data-size", f"only {data.usable} usable utterance(s), fewer than one measurement round draws "
            f"({repeat.round_samples} samples): measured on {repeat.copies} copies of each "
            f"({repeat.utterances_measured} per pass, epochs repeated) so that batches are full; "
            f"the figures describe these {data.usable} files",
            {"usable": data.usable, "copies": repeat.copies, "utterances_measured": repeat.utterances_measured,
             "round_samples": repeat.round_samples},
            f"for figures that stand for a whole corpus, diagnose at least {repeat.round_samples} of its "
            "utterances (one round's worth), or measure fewer --batches"))
    return out


MOST_BUDGET_FACTOR = 10  # a budget estimated beyond this many times the run's is not recommended
STOPPED_EARLY = 0.8  # an undecided stage at its most rounds that spent less of its share stopped there, not at its time


def stage_verdicts(stages: tuple[fig.StageRecord, ...], *, budget_s: float) -> list[DiagnosisFinding]:
    """A finding for each stage interrupted, too short or undecided, with the budget to decide it if any."""
    out = []
    for stage in stages:
        share, rounds, narrows = f"{stage.share_s:.0f} s share", stage.rounds, "a longer --budget narrows the intervals"
        if stage.status == fig.INTERRUPTED:
            words, recommendation = "interrupted: the figures of this stage are missing", None
        elif stage.status == fig.TOO_SHORT:
            words = f"{fig.TOO_SHORT}: {rounds} round(s) in its {share}; a decision needs {MIN_ROUNDS}" + (
                " for each of its figures" if rounds >= MIN_ROUNDS else "")  # split over parts (sweep axes, fixes)
            recommendation = _more_budget(stage, budget_s)
        elif (stage.status == fig.UNDECIDED and rounds >= fig.MAX_ROUNDS
              and stage.spent_s < STOPPED_EARLY * stage.share_s):
            words = (f"undecided after {rounds} rounds, the most its rounds take, in {stage.spent_s:.0f} s of its "
                     f"{share}: a figure sits on a class boundary (see the findings below)")
            recommendation = None
        elif stage.status == fig.UNDECIDED:
            words = (f"its {share} was spent after {rounds} rounds, before every figure was decided (see the "
                     "findings below)")
            recommendation = (_more_budget(stage, budget_s, "to decide, as its intervals narrow", narrows)
                              if stage.needs_s is not None and stage.needs_s > stage.spent_s else narrows)
        else:
            continue
        evidence = {"share_s": round(stage.share_s, 1), "spent_s": round(stage.spent_s, 1), "rounds": rounds,
                    "needs_s": None if stage.needs_s is None else round(stage.needs_s, 1)}
        out.append(DiagnosisFinding(f"stage-{stage.name.replace('_', '-')}", words, evidence, recommendation))
    return out


def _more_budget(stage: fig.StageRecord, budget_s: float, what: str = f"for {MIN_ROUNDS} rounds",
                 otherwise: str = "raise --budget") -> str:
    if stage.needs_s is None or stage.share_s <= 0 or stage.needs_s <= stage.share_s:
        return otherwise
    budget = math.ceil(budget_s * stage.needs_s / stage.share_s)
    if budget > MOST_BUDGET_FACTOR * budget_s:
        return (f"no --budget up to {MOST_BUDGET_FACTOR}x this one is estimated to decide it (this stage needs about "
                f"{stage.needs_s:.0f} s {what} on this machine): its figure sits close to a class boundary")
    return f"raise --budget to about {budget} s (this stage needs about {stage.needs_s:.0f} s {what} on this machine)"


def input_bound_finding(topic: str, name: str, figures: fig.InputBoundFigures,
                        recommendation: str) -> DiagnosisFinding:
    """The input-bound share of the step fed by name; recommendation only for a share decided input-bound."""
    figure, label, share = figures.share, figures.classification, figures.share.median
    evidence = {**estimate_evidence("share", figure), "t_real_s": figures.t_real, "t_synthetic_s": figures.t_synthetic}
    why = why_undecided(figure, percent)
    if why:
        at_median = "" if label == fig.UNDECIDED else f" ({label} at the median)"
        return DiagnosisFinding(topic, f"{name}: {why}; median share {share:.0%}{at_median}{wait_words(figures)}",
                                evidence, None, figure)
    lost = "waits for input" if figures.wait is None else "lost to input"  # a file before schema 8: its old words
    waits = (f"{share:.0%} of step time {lost}" if share >= 0 else
             f"share {share:.0%}: fed faster than its synthetic twin, i.e. no measurable wait, the rest noise")
    return DiagnosisFinding(topic, f"{name} is {label} ({waits}; {span_words(figure, percent)}){wait_words(figures)}",
                            evidence, None if label == "not input-bound" else recommendation, figure)


def wait_words(figures: fig.InputBoundFigures) -> str:
    """The wait share beside the input-bound share (schema 8 on): on a CPU-only machine, a share the step does
    not wait for is the pipeline's CPU contention."""
    if figures.wait is None:
        return ""
    wait = figures.wait.median
    words = f"; the step waits for its batch {wait:.1%} of its time"
    if figures.wait.decided and wait < MODERATELY_INPUT_BOUND <= figures.share.median:
        words += ": the rest of the loss is CPU the pipeline takes from the step, not waiting"
    return words


def variation_finding(cycle: Cycle | None, variation: RoundsEstimate | None, batches: int,
                      name: str | None = None, structure: dict[int, str] | None = None) -> DiagnosisFinding | None:
    """A significant cycle in the times of `batches` steady batches, else their variation at or above
    UNSTABLE_VARIATION; None for neither. name: a loader's, said first and ending the topic. A cycle at
    a period of structure (pipeline_model.structural_periods) or a small multiple is named as it, no fix."""
    said, suffix = ("", "") if name is None else (f"{name}: ", f"-{name}")
    evidence = {**(estimate_evidence("variation", variation) if variation is not None else {}), "batches": batches,
                "cycle_period": None if cycle is None else cycle.period}
    explained = None
    if cycle is not None and cycle.significant and cycle.period:  # at a period of structure, or a multiple
        explained = next((words for period, words in sorted((structure or {}).items())
                          if any(cycle.period == period * k for k in STRUCTURE_MULTIPLES)), None)
    if explained is not None:
        return DiagnosisFinding(f"cycle{suffix}", f"{said}per-batch times repeat every {cycle.period} batches: the "
                                f"pipeline's own structure, {explained}; not a stall",
                                {**evidence, "cycle_strength": cycle.strength, "cycle_explained_by": explained},
                                None)
    if cycle is not None and cycle.significant:
        return DiagnosisFinding(f"cycle{suffix}", f"{said}per-batch times repeat every {cycle.period} batches",
                                {**evidence, "cycle_strength": cycle.strength, "cycle_threshold": cycle.threshold},
                                "periodic stalls: a slow element every period (long files, GC, a shared disk); raise "
                                "prefetch or parallelism so the stall is hidden")
    if variation is None or variation.median < fig.UNSTABLE_VARIATION:
        return None
    return DiagnosisFinding(f"variation{suffix}", f"{said}per-batch times vary by {variation.median:.0%} of the mean "
                            f"({why_undecided(variation, percent) or span_words(variation, percent)})", evidence,
                            None, variation)


STRUCTURE_MULTIPLES = (1, 2, 3)  # a cycle at a structure's period times one of these is that structure


def point_label(axis: str, point: int) -> str:
    """A sweep point in words: '2 workers', 'AUTOTUNE workers', 'batch 16'."""
    if axis == "workers":
        return "AUTOTUNE workers" if point == -1 else f"{point} worker{'s' if point != 1 else ''}"
    return f"batch {point}"


def sweep_verdicts(sweep: tuple[fig.SweepAxis, ...]) -> list[DiagnosisFinding]:
    return [verdict for verdict in map(_sweep_verdict, sweep) if verdict is not None]


def _sweep_verdict(figures: fig.SweepAxis) -> DiagnosisFinding | None:
    axis, rounds = figures.axis, figures.rounds
    compared = [point for point in figures.points if point.vs_current is not None]
    if not compared:
        return None
    clear = [point for point in compared if point.vs_current.significant and point.ratio.decided]
    chosen = max(clear or compared, key=lambda point: point.ratio.median)
    gain, figure = chosen.vs_current, chosen.ratio
    best, now = point_label(axis, chosen.point), point_label(axis, figures.current)
    prefix, setting = ("w", "worker count") if axis == "workers" else ("bs", "batch size")
    evidence = {f"{prefix}{point.point}_samples_per_s": point.samples_per_s for point in figures.points}
    evidence.update({"current": now, "best": best, "ratio_median": figure.median, "ratio_low": figure.low,
                     "ratio_high": figure.high, "rounds_faster": f"{gain.wins}/{rounds}",
                     "coverage": round(figure.coverage, 3)})
    if gain.p_value is not None:
        evidence["p_value"] = gain.p_value
    per_round = (f"{figure.median:.2f}x (interval {figure.low:.2f}-{figure.high:.2f}x, "
                 f"faster in {gain.wins}/{rounds} rounds"
                 + (f", p={gain.p_value:.2g})" if gain.p_value is not None else ")"))
    if clear:
        point = chosen.point
        recommendation = (f"set num_parallel_calls={'tf.data.AUTOTUNE' if point == -1 else point}" if axis == "workers"
                          else f"batch {point} if the step is input-bound and training allows it (batch size also "
                          "changes the optimisation)")
        return DiagnosisFinding(axis, f"the tf_native WAV loader with {best} delivers {per_round} the samples/s "
                                f"of the current {now}", evidence, recommendation, figure)
    why = why_undecided(figure, _times)
    undecided = f"; {why}" if why else ""
    if rounds < MIN_ROUNDS:
        words = f"{why}: no {setting} recommendation (best: {best} at {per_round} vs {now})"
    elif figure.median < 1:
        words = (f"no {setting} was faster than the current {now} in the same rounds (closest: {best} at "
                 f"{per_round}){undecided}")
    else:
        words = (f"no {setting} beats the current {now} beyond the round-to-round noise (best: {best} at "
                 f"{per_round}; a recommendation needs a median gain >= {fig.SWEEP_MIN_GAIN:.0%}, >= "
                 f"{fig.SWEEP_MIN_WIN_SHARE:.0%} of rounds faster and p < {fig.SWEEP_ALPHA}){undecided}")
    return DiagnosisFinding(axis, words, evidence, None, figure)


def feed_verdict(figures: fig.FeedFigures) -> DiagnosisFinding:
    """Would this pipeline keep a GPU of the step asked for busy? Decided from the feed rate's interval."""
    label, feed = figures.pipeline, figures.feed
    evidence = {"feed_step_s": feed.step_s, "feed_step_low_s": feed.step_low_s, "feed_step_high_s": feed.step_high_s,
                "feed_steps_per_s": feed.steps_per_s, "feed_audio_s_per_s": feed.audio_s_per_s}
    topic, fed = f"feed-{label}", feed_words(figures)
    if figures.step_s is None:
        return DiagnosisFinding(topic, f"{label} {fed}; {figures.reason}", evidence, None)
    stats = figures.stats
    evidence.update({"step_s": figures.step_s, "busy_fraction": figures.round.busy_fraction,
                     "util_median_pct": stats.util_median, "idle_fraction": stats.idle_fraction,
                     "oscillation_period_s": stats.oscillation_period_s})
    step, assumed = f"a {figures.step_s * 1e3:.3g} ms step ({figures.step_time})", ""
    if stand_in_step(figures):  # a published model's step on a published GPU: said first
        step, assumed = "it", (f"assuming a stand-in step, the published {figures.step_time} GPU step "
                               f"({figures.step_s * 1e3:.3g} ms on this data; not your model's): ")
    measured = f"busy {figures.round.busy_fraction:.0%} in a round at that step"
    if stats.oscillation.significant:
        measured += f", utilisation oscillating every {stats.oscillation_period_s:.3g} s"
    verdict = {True: f"keeps {step} >= 90 % busy", False: f"would starve {step}",
               None: f"vs {step}: undecided, the step lies inside the feed rate's interval"}[figures.keeps_busy]
    starves = ("the GPU would wait for input: a faster loader (for a dataset PATH, the loader alternatives measured "
               "above), more parallel calls, prefetch, or the .npy cache")
    return DiagnosisFinding(topic, f"{assumed}{label} {verdict}: it {fed}; {measured}", evidence,
                            starves if figures.keeps_busy is False else None)


def gpu_verdicts(gpu: fig.GpuFigures) -> list[DiagnosisFinding]:
    if not gpu.available or gpu.stats is None:
        return []
    stats = gpu.stats
    evidence = {"util_median_pct": stats.util_median, "idle_fraction": stats.idle_fraction,
                "oscillation_period_s": stats.oscillation_period_s}
    if stats.util_median < fig.GPU_IDLE_MEDIAN_PCT:
        return [DiagnosisFinding("gpu", f"GPU busy only {stats.util_median:.0f}% (median) while training", evidence,
                                 "the GPU waits: see the input-bound findings above")]
    return [DiagnosisFinding("gpu", f"GPU busy {stats.util_median:.0f}% (median)", evidence, None)]


def feed_words(figures: fig.FeedFigures) -> str:
    """The feed rate in words ('feeds steps down to ... ms (... steps/s, ...)') or why there is no figure."""
    feed = figures.feed
    if feed.step_s is None:
        return f"kept no step up to {feed.step_low_s * 1e3:.4g} ms >= 90 % busy"
    low, high = feed.steps_per_s_interval
    upper = "no upper end" if high is None else f"{high:.4g}"
    audio = feed.audio_s_per_s
    return (f"feeds steps down to {feed.step_s * 1e3:.3g} ms ({feed.steps_per_s:.4g} steps/s, "
            f"interval {low:.4g}-{upper}" + (f"; {audio:,.0f} audio-s/s)" if audio is not None else ")"))


# ------------------------------------------------------------------------------------- what to change first

FIX_TOPIC = "fix-"  # the topic prefix of a change perfsuite applied to the pipeline and measured (fix_finding)
FRAME_GIVEN = "given"  # batch_spec.BatchLayout.frame_source when the user gave --frame-hop-s
PER_AUDIO_SECOND = ("audio_s_per_s", "float_ops_per_audio_s", "feed_audio_s_per_s")  # evidence resting on frame_s

# What each recommendation pushes, by its finding's topic (a key ending in '-' covers every topic it begins). A
# finding that recommends must have its topic here: contradictions() refuses one that does not.
PUSHES: dict[str, tuple[str, ...]] = {
    "batch": ("perfsuite-options",), "stage-": ("longer-budget",), "input-bound": ("faster-input",),
    "bottleneck": ("longer-budget", "quiet-machine"), "python-op": ("graph-ops",),
    "prefetch": ("more-prefetch",), "fix-prefetch": ("more-prefetch",),
    "parallelism": ("more-parallelism",), "fix-map-parallelism": ("more-parallelism",),
    "read-parallelism": ("parallel-reads",), "fix-read-parallelism": ("parallel-reads",),
    "fixed-padding": ("less-padding",), "fix-padding": ("less-padding",),
    "cache-order": ("cache-before-repeat",), "fix-cache": ("cache", "more-memory"),
    "fix-capacity-split": ("parallelism-split",),  # the capacity model's calls per stage: more or fewer
    "prefetch-to-device": ("prefetch-to-device-last",), "cycle": ("more-prefetch", "more-parallelism"),
    "retracing": ("fewer-traces",), "feed-": ("faster-input", "more-parallelism", "more-prefetch"),
}
# The step retraced (the retracing finding, pipeline_findings.py): one trace for every length, never padding back
# to a fixed shape, which [fixed-padding] and the padding fix push against.
_ONE_TRACE = ("give the step an input_signature with None on the axes that vary (tf.function(input_signature=["
              "tf.TensorSpec([None, None, ...])])) or tf.function(reduce_retracing=True), so one trace serves every "
              "length; where shapes must stay static (jit_compile), ")
RETRACE_RECOMMENDATION = _ONE_TRACE + ("bucket by length to a few fixed boundaries (bucket_by_sequence_length with "
                                       "pad_to_bucket_boundary=True): one trace per bucket")


def retrace_recommendation(buckets: bool) -> str:
    """The retracing advice; a pipeline that already buckets is never told to bucket."""
    if buckets:
        return _ONE_TRACE + ("pad each of the pipeline's buckets to its boundary (pad_to_bucket_boundary=True): "
                             "one trace per bucket")
    return RETRACE_RECOMMENDATION


# Directions no two recommendations of one diagnosis may push together.
OPPOSED: tuple[tuple[str, str], ...] = (("fixed-shapes", "less-padding"), ("more-prefetch", "less-prefetch"),
                                        ("more-parallelism", "less-parallelism"), ("more-memory", "less-memory"))


def material(gain: RoundsEstimate | None) -> bool:
    """Whether a measured gain calls for its change: MIN_ROUNDS rounds, its interval >= MATERIAL_GAIN."""
    return gain is not None and gain.rounds >= MIN_ROUNDS and gain.low >= MATERIAL_GAIN


def gain_words(gain: RoundsEstimate) -> str:
    """'1.80x [1.70, 1.90]': a gain's median and interval."""
    return f"{gain.median:.2f}x [{gain.low:.2f}, {gain.high:.2f}]"


def fix_finding(name: str, words: str, unit: str | None, gain: RoundsEstimate | None) -> DiagnosisFinding:
    """A change applied and measured (gain: after / before per round): 'apply it' only for a material gain."""
    topic = f"{FIX_TOPIC}{name}"
    if gain is None:
        return DiagnosisFinding(topic, f"{words}: applied, but no measured round fit the time left",
                                {"applied": True}, "a longer --budget measures it")
    figure = f"measured {gain_words(gain)} {unit} over {gain.rounds} rounds"
    evidence = {**estimate_evidence("gain", gain), "applied": True, "unit": unit}
    if material(gain):
        return DiagnosisFinding(topic, f"{words}: {figure}", evidence, f"apply it: {words}", gain)
    return DiagnosisFinding(topic, f"{words}: {figure}; {_not_material(gain)}", evidence, None, gain)


def _not_material(gain: RoundsEstimate) -> str:
    if gain.rounds < MIN_ROUNDS:
        return f"{why_undecided(gain, _times)}; no change yet"
    if gain.high < 1.0:
        return "slower with it: no change"
    if gain.low < 1.0:
        return "within noise: its interval holds 1.00x, so whether it helps is undecided; no change"
    if gain.median >= MATERIAL_GAIN:
        return (f"faster, but its interval reaches down to {gain.low:.2f}x, not above {MATERIAL_GAIN:.2f}x: not shown "
                "to be worth a change (a longer --budget narrows it)")
    return f"too small to call for a change: its interval does not lie above {MATERIAL_GAIN:.2f}x"


def declined(gain: RoundsEstimate | None) -> bool:
    """Whether a measured gain was found not worth its change: enough rounds to decide, and not material."""
    return gain is not None and gain.rounds >= MIN_ROUNDS and not material(gain)


def measured_change(finding: DiagnosisFinding) -> bool:
    """Whether finding is a change measured on this pipeline (a fix_finding with its gain)."""
    return finding.topic.startswith(FIX_TOPIC) and finding.interval is not None


def ranked_changes(findings: list[DiagnosisFinding]) -> tuple[list[DiagnosisFinding], list[DiagnosisFinding]]:
    """(the changes measured here, those to apply first, each group by median gain; the rest, in order)."""
    changes = sorted((f for f in findings if measured_change(f)),
                     key=lambda f: (not material(f.interval), -f.interval.median))
    return changes, [f for f in findings if not measured_change(f)]


CHANGE_FIRST = "what to change first"  # the heading that opens a diagnosis' findings


def change_first_words(changes: list[DiagnosisFinding]) -> str:
    """What the changes measured on this pipeline (ranked_changes' first part) come to, under CHANGE_FIRST."""
    if not changes:
        return "no change was measured on this pipeline (the findings below say why)"
    apply = sum(material(c.interval) for c in changes)
    return (f"{len(changes)} change(s) measured on this pipeline, ranked by gain; {apply} to apply (a gain whose "
            f"interval lies above {MATERIAL_GAIN:.2f}x)")


def pushes(finding: DiagnosisFinding) -> tuple[str, ...] | None:
    """The directions finding's recommendation pushes (PUSHES); () if none, None if its topic is not there."""
    if not finding.recommendation:
        return ()
    if finding.topic in PUSHES:
        return PUSHES[finding.topic]
    prefixes = [key for key in PUSHES if key.endswith("-") and finding.topic.startswith(key)]
    return PUSHES[max(prefixes, key=len)] if prefixes else None


def deferred_to_measured(findings: list[DiagnosisFinding]) -> list[DiagnosisFinding]:
    """findings, a recommendation pushing where a measured change went dropped if declined, else naming it."""
    changes = [f for f in findings if measured_change(f)]
    return [_deferred(f, changes) if not measured_change(f) else f for f in findings]


def _deferred(finding: DiagnosisFinding, changes: list[DiagnosisFinding]) -> DiagnosisFinding:
    directions = set(pushes(finding) or ())
    same = [c for c in changes if directions & set(PUSHES.get(c.topic, ()))]
    if not same:
        return finding
    measured = ", ".join(f"[{c.topic}] {gain_words(c.interval)}" for c in same)
    if all(declined(c.interval) for c in same):
        return replace(finding, finding=f"{finding.finding}; that change was measured here ({measured}): not worth "
                       "making on these figures", recommendation=None)
    pending = "" if any(material(c.interval) for c in same) else ", not yet decided"
    return replace(finding, recommendation=f"{finding.recommendation} (measured here{pending}: {measured})")


def contradictions(findings: list[DiagnosisFinding]) -> list[str]:
    """In words, each pair of recommendations that push OPPOSED directions, and each that pushes where a
    measured change was declined; [] when they agree. ValueError names a topic PUSHES does not declare."""
    undeclared = sorted({f.topic for f in findings if pushes(f) is None})
    if undeclared:
        raise ValueError(f"recommendations without declared directions (verdict.diagnosis.PUSHES): "
                         f"{', '.join(undeclared)}")
    found = []
    for i, a in enumerate(findings):
        for b in findings[i + 1:]:
            found += [f"[{a.topic}] pushes {x}, [{b.topic}] pushes {y}" for x in pushes(a) for y in pushes(b)
                      if (x, y) in OPPOSED or (y, x) in OPPOSED]
    for change in (c for c in findings if measured_change(c) and declined(c.interval)):
        found += [f"[{f.topic}] recommends {d}, measured not worth it in [{change.topic}]" for f in findings
                  if not measured_change(f) for d in pushes(f) if d in PUSHES.get(change.topic, ())]
    return found


def stand_in_step(figures: fig.FeedFigures) -> bool:
    """Whether the feed verdict's step is a published model's (STEP_PRESETS), not seconds the user gave."""
    return figures.step_time in STEP_PRESETS


def frame_assumed(finding: DiagnosisFinding, layout: BatchLayout | None) -> DiagnosisFinding:
    """finding opened with the seconds per frame assumed, where a figure rests on them and none was given."""
    if (layout is None or layout.frame_source == FRAME_GIVEN
            or all(finding.evidence.get(key) is None for key in PER_AUDIO_SECOND)):
        return finding
    hint = "" if "--frame-hop-s" in layout.frame_source else "; --frame-hop-s gives yours"
    assumed = f"assuming {layout.frame_s:.4g} s of audio per frame ({layout.frame_source}{hint})"
    words = finding.finding
    return replace(finding, finding=f"{assumed}, and {words.removeprefix('assuming ')}"
                   if words.startswith("assuming ") else f"{assumed}: {words}")
