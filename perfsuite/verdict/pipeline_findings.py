"""The findings of a diagnosis in words: verdicts() of the one record (verdict/diagnosis_record.py) and of its
pipeline parts; the shared wording, the ranking and the directions are in perfsuite.verdict.diagnosis."""

from __future__ import annotations

from collections.abc import Callable

from perfsuite.measure.batch_spec import BatchLayout
from perfsuite.measure.speech import PaddingFigures
from perfsuite.verdict import diagnosis as wording
from perfsuite.verdict.capacity import capacity_verdicts
from perfsuite.verdict.diagnosis_figures import (
    Bottleneck,
    DiagnosisFinding,
    FixGain,
    GraphFindings,
    RoundsEstimate,
    StageShare,
    Throughput,
    WorkFigures,
    format_figure,
)
from perfsuite.verdict.diagnosis_record import Diagnosis
from perfsuite.workload.pipeline_model import PythonOp, shape_words, structural_periods

FIXED_PADDING_WASTE = 0.10  # padded frames past each batch's longest sample, as a share: padding to a fixed length
# A stage's median share below minus this: the prefixes' rates disagree. tf.data's own rewrites (a map fused
# with the batch after it runs ahead of the stages before it) make a longer prefix faster by less than this.
INCONSISTENT_SHARE = 0.5


def verdicts(diagnosis: Diagnosis) -> list[DiagnosisFinding]:
    """The findings of a diagnosis, the changes measured on this pipeline first (ranked_changes); a graph
    finding recommends its change only when the step is measured to wait for input (when_waiting)."""
    bound, graph, target, layout = diagnosis.input_bound, diagnosis.graph, diagnosis.target, diagnosis.layout
    waits = None if bound is None or not bound.share.decided else bound.classification != "not input-bound"
    judged = {"waits": waits, "why_not": _no_change_because(diagnosis),
              "share": None if bound is None else bound.share}
    out = [*(wording.data_verdicts(diagnosis.data) if diagnosis.data is not None else []),
           *wording.stage_verdicts(diagnosis.stages, budget_s=diagnosis.settings.budget_s)]
    out.append(layout_finding(layout) if layout is not None else None)
    out += _startup_verdicts(diagnosis)
    out += throughput_verdicts(diagnosis.throughput, graph.stages) if diagnosis.throughput is not None else []
    if target.step is None:
        out.append(DiagnosisFinding("input-bound", "not measured: the input-bound share needs a training step to "
                                    "feed (--step MODULE:FUNCTION); throughput only", {}, None))
    elif bound is not None:
        waiting = "the step waits for input: see the Python-function, prefetch and parallelism findings"
        out.append(wording.input_bound_finding("input-bound", "the pipeline", bound, waiting))
    out += bottleneck_verdicts(diagnosis.bottleneck)
    out += capacity_verdicts(diagnosis.capacity)
    out += fix_verdicts(diagnosis.fixes)
    out += [python_op_finding(op, **judged) for op in graph.python_ops]
    last = graph.last_stage or (graph.transformations[-1] if graph.transformations else None)  # wrappers skipped
    out.append(prefetch_finding(last, graph.ends_with_prefetch, graph.inject_prefetch, **judged))
    out += graph_findings(graph, padding=None if diagnosis.throughput is None else diagnosis.throughput.padding,
                          not_measured=layout.mel_rule if layout is not None and layout.mel is None
                          else "the throughput stage read no batches", **judged)
    out += _shape_verdicts(diagnosis)
    out += wording.sweep_verdicts(diagnosis.sweep)
    out += wording.gpu_verdicts(diagnosis.gpu) if diagnosis.gpu is not None else []
    if diagnosis.feed is not None and not (target.step and wording.stand_in_step(diagnosis.feed)):
        out.append(wording.feed_verdict(diagnosis.feed))
    out += work_verdicts(diagnosis.work)
    changes, rest = wording.ranked_changes(wording.deferred_to_measured(
        [wording.frame_assumed(f, layout) for f in out if f is not None]))
    return changes + rest


def _no_change_because(diagnosis: Diagnosis) -> str:
    """Why a graph finding calls for no change: the input-bound share not measured, undecided, or low."""
    bound = diagnosis.input_bound
    if diagnosis.target.step is None:
        return "whether it costs training time needs --step (the input-bound share)"
    if bound is None:
        return "the input-bound share was not measured (no time)"
    why = wording.why_undecided(bound.share, wording.percent)
    if why:
        return f"whether it costs training time is {why}"
    return f"the step does not wait for input (share {bound.share.median:.0%}): no change needed here"


def _startup_verdicts(diagnosis: Diagnosis) -> list[DiagnosisFinding]:
    """The start-up and the step's first call, measured apart from every stage's figures."""
    if diagnosis.startup_s is None:
        return []
    parts = [f"importing and building the pipeline and its first batches {diagnosis.startup_s:.1f} s"]
    evidence = {"startup_s": diagnosis.startup_s}
    if diagnosis.throughput is not None:
        parts.append(f"the first batch {diagnosis.throughput.first_batch_s:.2f} s")
    if diagnosis.step is not None:
        parts.append(f"the step's first call {diagnosis.step.first_s:.2f} s (trace, compile)")
        evidence["first_call_s"] = diagnosis.step.first_s
    return [DiagnosisFinding("start-up", f"{'; '.join(parts)}: kept apart; the stages shared the budget left after "
                             "them", evidence, None)]


def _shape_verdicts(diagnosis: Diagnosis) -> list[DiagnosisFinding]:
    graph, step, target = diagnosis.graph, diagnosis.step, diagnosis.target
    shapes, retraces = graph.dynamic_shapes, None if step is None else step.retraces
    if not shapes and not retraces:
        return []
    where = ", ".join(f"{s.component or 'the element'} {s.shape}" for s in shapes) or "none in element_spec"
    evidence = {"dynamic": where, "retraces": retraces, "step_calls": None if step is None else step.calls}
    if target.step is None:
        finding = f"dynamic shapes ({where}) can make a tf.function step retrace; --step measures whether it does"
    elif retraces is None:
        finding = f"dynamic shapes ({where}); the step is not a tf.function, so its retraces cannot be counted"
    elif retraces:
        return [DiagnosisFinding("retracing", f"the step retraced {retraces} time(s) over {step.calls} calls "
                                 f"in this run; dynamic shapes: {where}", evidence,
                                 wording.retrace_recommendation(graph.buckets))]
    else:
        finding = f"dynamic shapes ({where}), but the step did not retrace over {step.calls} calls in this run"
    return [DiagnosisFinding("shapes", finding, evidence, None)]


# ---------------------------------------------------------------------------------------- its parts


def throughput_verdicts(figures: Throughput, stages=()) -> list[DiagnosisFinding]:
    """The steady rate, its audio and padding, and a cycle (named as the stages that make it) or variation."""
    rate, unit = figures.rate, figures.unit
    if rate is None:
        return []
    evidence = {**wording.estimate_evidence(f"{unit}_per_s", rate), "first_batch_s": figures.first_batch_s,
                "batches_per_round": figures.batches_per_round, "restarts": figures.restarts}
    out = [DiagnosisFinding("throughput", f"steady throughput {fmt_rate(rate.median)} {unit} per wall-clock second "
                            f"over a round ({wording.span_words(rate, fmt_rate)}); the first batch took "
                            f"{figures.first_batch_s:.2f} s (start-up, kept apart)", evidence, None, rate)]
    if figures.padding is not None or figures.audio_s_per_s is not None:  # a file before the layout: audio alone
        out.append(speech_finding(figures.audio_s_per_s, figures.padding, fmt_rate, figures.padding_efficiency))
    out.append(wording.variation_finding(figures.cycle, figures.variation, len(figures.batch_s),
                                         structure=structural_periods(stages)))
    return [finding for finding in out if finding is not None]


def fmt_rate(value: float) -> str:
    """A rate in words: whole units from 100 up, three significant digits below."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def bottleneck_verdicts(bottleneck: Bottleneck | None) -> list[DiagnosisFinding]:
    """The stage that limits throughput, with its share of the time per sample and its interval."""
    if bottleneck is None or not (bottleneck.stages or bottleneck.no_work_rounds):
        return []
    no_work = bottleneck.no_work_rounds
    if not bottleneck.stages:
        return [DiagnosisFinding("bottleneck", f"nothing to attribute: in all {no_work} round(s) the whole pipeline "
                                 "read no slower per sample than a dataset that does no work, so its stages cost less "
                                 "than the reading can tell apart", {"no_work_rounds": no_work}, None, None)]
    listing = ", ".join(f"{s.stage} {s.share.median:.0%} [{s.share.low:.0%}, {s.share.high:.0%}]"
                        for s in bottleneck.stages)
    evidence = {"stages": [s.stage for s in bottleneck.stages],
                "shares": [s.share.median for s in bottleneck.stages],
                "rates": [s.rate.median for s in bottleneck.stages]}
    top = {s.stage: s.share for s in bottleneck.stages}[bottleneck.limiting]
    if no_work:
        evidence["no_work_rounds"] = no_work
        listing += (f"; {no_work} more round(s) left out, where the whole pipeline read no slower than a dataset "
                    "that does no work")
    recommendation = None
    if bottleneck.decided:
        finding = (f"{bottleneck.limiting} limits throughput: it adds {top.median:.0%} [{top.low:.0%}, "
                   f"{top.high:.0%}] of the time per sample (over {top.rounds} rounds; each stage's share: {listing})")
    elif no_work > top.rounds:
        finding = (f"the limiting stage is undecided: in {no_work} of {no_work + top.rounds} rounds the whole "
                   "pipeline read no slower than a dataset that does no work, so its stages cost about what reading "
                   f"them costs ({listing})")
    elif not consistent(bottleneck.stages):
        finding = (f"the limiting stage is undecided after {top.rounds} round(s): a longer prefix read faster per "
                   f"sample than a shorter one it contains, so the shares do not add up ({listing})")
        recommendation = "run again on a machine with nothing else running"
    else:
        finding = (f"the limiting stage is undecided after {top.rounds} round(s): the shares' intervals overlap "
                   f"({listing})")
        recommendation = "a longer --budget separates them"
    return [DiagnosisFinding("bottleneck", finding, evidence, recommendation, top)]


def consistent(stages: tuple[StageShare, ...]) -> bool:
    """Whether no stage's median share lies below -INCONSISTENT_SHARE (a busy machine's noise, not work)."""
    return all(stage.share.median >= -INCONSISTENT_SHARE for stage in stages)


def fix_verdicts(fixes: tuple[FixGain, ...]) -> list[DiagnosisFinding]:
    """Each fix measured (wording.fix_finding), and each fix not applied with why."""
    return [wording.fix_finding(fix.name, fix.words, fix.unit, fix.gain) if fix.applied else
            DiagnosisFinding(f"{wording.FIX_TOPIC}{fix.name}", f"{fix.name}: not applied ({fix.why})",
                             {"applied": False}, None) for fix in fixes]


def work_verdicts(figures: WorkFigures | None) -> list[DiagnosisFinding]:
    """The work per sample and per audio second, the achieved rate against the peak; what could not be read."""
    if figures is None:
        return []
    found = [DiagnosisFinding("work", f"not read: {why}", {}, None) for why in figures.unavailable]
    for label, fingerprint, rate, per_audio_s in (
            ("pipeline", figures.pipeline, figures.pipeline_float_ops_per_s, figures.pipeline_float_ops_per_audio_s),
            ("step", figures.step, figures.step_float_ops_per_s, None)):
        if fingerprint is None:
            continue
        words = ", ".join(f"{format_figure(value)} {key.replace('_', ' ')}" for key, value in fingerprint.work.items()
                          if key.startswith("float_ops"))
        if python := fingerprint.work.get("python_work_per_sample"):
            words += f", {format_figure(python)} array elements through library calls per sample in Python bodies"
        evidence = dict(fingerprint.work)
        if per_audio_s is not None:
            evidence["float_ops_per_audio_s"] = per_audio_s
            words += f", {format_figure(per_audio_s)} float ops per audio s (measured audio)"
        finding = f"the {label}'s work: {words} (counted as {fingerprint.method.split('(')[0].strip()})"
        if unresolved := fingerprint.structure.get("unresolved_float_ops"):
            evidence["unresolved_float_ops"] = sum(unresolved.values())
            finding += ("; not counted, so the figure is a lower bound: "
                        + ", ".join(f"{count} {op}" for op, count in sorted(unresolved.items())))
        if rate is not None and figures.peak is not None:
            share = figures.peak.share(rate)
            evidence.update(achieved_float_ops_per_s=rate, peak_float_ops_per_s=figures.peak.float_ops_per_s)
            finding += (f"; it runs at {format_figure(rate)} float ops/s, {share:.1%} of this machine's measured "
                        f"peak ({format_figure(figures.peak.float_ops_per_s)}/s, {figures.peak.kernel})")
            if share > 1:
                finding += ": faster than that reference, which is what this machine reached on it, not a bound"
        found.append(DiagnosisFinding("work", finding, evidence, None))
    return found


def layout_finding(layout: BatchLayout) -> DiagnosisFinding:
    """Which components were read as the audio and its lengths, by which rule; or why none was."""
    evidence = {"structure": layout.structure, "mel": layout.mel, "mel_len": layout.mel_len,
                "frame_s": layout.frame_s, "frame_source": layout.frame_source}
    if layout.mel is None:
        return DiagnosisFinding("batch", f"no audio-s/s or padding efficiency: {layout.mel_rule}", evidence,
                                "name the audio and its lengths: --batch-spec mel=PATH,mel_len=PATH (tuple indices "
                                "or dict keys joined by '/')")
    return DiagnosisFinding("batch", layout.words(), evidence, None)


def padding_source_words(padding: PaddingFigures) -> str:
    """Where the true lengths came from, and why the length tensor was not used where it was not."""
    words = f"lengths from: {padding.source_words()}"
    if padding.lengths_at_padded:
        words += (f"; the length tensor said the padded length for every sample in {padding.lengths_at_padded} of "
                  f"{padding.batches} batches, so those were checked against the content")
    return words


def speech_finding(audio: RoundsEstimate | None, padding: PaddingFigures | None,
                   fmt: Callable[[float], str] = format_figure, efficiency: float | None = None) -> DiagnosisFinding:
    """Audio seconds per second (when measured) and the padding efficiency; padding None: an older file's."""
    evidence, source = {"padding_efficiency": efficiency}, ""
    if padding is not None:
        evidence = {"padding_efficiency": padding.efficiency, "real_frames": padding.real_frames,
                    "padded_frames": padding.padded_frames, "batches": padding.batches,
                    "length_source": padding.source_words()}
        efficiency, source = padding.efficiency, f" ({padding_source_words(padding)})"
    words = f"batches are {efficiency:.0%} real frames, the rest padding{source}"
    if audio is None:
        return DiagnosisFinding("speech", words, evidence, None)
    return DiagnosisFinding("speech", f"{fmt(audio.median)} seconds of audio per second "
                            f"({wording.span_words(audio, fmt)}); {words}",
                            {**wording.estimate_evidence("audio_s_per_s", audio), **evidence}, None, audio)


# ---------------------------------------------------------------------------------------- the graph


def graph_findings(graph: GraphFindings, *, padding: PaddingFigures | None, not_measured: str | None = None,
                   waits: bool | None = None, why_not: str = "", share: RoundsEstimate | None = None,
                   ) -> list[DiagnosisFinding]:
    """The graph as it runs and what in it to change; waits, why_not and share as when_waiting takes them."""
    found = [DiagnosisFinding("graph", f"as it runs: {graph.chain_words()}",
                              {"last_stage": graph.last_stage, "read_from": graph.read_from}, None)]
    if after := graph.after_prefetch_to_device:
        found.append(DiagnosisFinding(
            "prefetch-to-device", f"prefetch_to_device is not the last transformation: {' -> '.join(after)} "
            "follow(s) it; TensorFlow requires it last, so the stages after it undo what it does",
            {"after": list(after)},
            "move prefetch_to_device to the very end of the pipeline (after with_options is fine)"))
    if maps := tuple(s.node for s in graph.sequential_maps()):
        found.append(when_waiting("parallelism", f"{len(maps)} map(s) run one element at a time (no "
                                  f"num_parallel_calls): {', '.join(maps)}", {"maps": list(maps)},
                                  "give each map num_parallel_calls=tf.data.AUTOTUNE", waits, why_not, share))
    if reads := graph.sequential_reads:  # an interleave or flat_map over file readers without parallel calls
        found.append(when_waiting("read-parallelism", f"files read one at a time: {'; '.join(reads)}",
                                  {"reads": list(reads)}, "read files in parallel: interleave(..., "
                                  "num_parallel_calls=tf.data.AUTOTUNE) or TFRecordDataset(files, "
                                  "num_parallel_reads=tf.data.AUTOTUNE)", waits, why_not, share))
    if caches := graph.caches_after_endless_repeat:
        found.append(DiagnosisFinding(
            "cache-order", f"{'; '.join(caches)} comes after an endless repeat: it never completes a pass, "
            "so it never serves an element from the cache, and it holds every element it reads until memory "
            "runs out",
            {"caches": list(caches)}, "move .cache() before .repeat()"))
    fixed = tuple(f"{s.method} {s.node} ({', '.join(shape_words(p) for p in s.padded_shapes)})"
                  for s in graph.fixed_padding())
    padded = fixed_padding_finding(padding, fixed, not_measured, buckets=graph.buckets)
    return [*found, padded] if padded is not None else found


def fixed_padding_finding(padding: PaddingFigures | None, graph_shapes: tuple[str, ...],
                          not_measured: str | None = None, *, buckets: bool = False) -> DiagnosisFinding | None:
    """Padding to a fixed length when at least FIXED_PADDING_WASTE of the padded frames lie past each batch's
    longest sample, else None; graph_shapes (fixed padded_batch stages) are named without a figure where no
    batches were measured (not_measured says why). With buckets, the pipeline is never told to bucket."""
    shapes = "; ".join(graph_shapes)
    evidence = {"padded_batch": shapes or None}
    if padding is None:  # no batches measured: the graph's fixed padded_batch stages alone, if any
        return None if not shapes else DiagnosisFinding(
            "fixed-padding", f"{shapes} pads to a fixed length; its waste is not measured: "
            f"{not_measured or 'no batches were read'}", evidence, None)
    if padding.beyond_longest < FIXED_PADDING_WASTE:
        return None
    lengths = " or ".join(str(t) for t in padding.time_axes)
    where = f" ({shapes})" if shapes else ""
    evidence |= {"beyond_longest": padding.beyond_longest, "padding_efficiency": padding.efficiency,
                 "to_longest_efficiency": padding.to_longest, "time_axes": list(padding.time_axes),
                 "length_source": padding.source_words()}
    less = ("the pipeline already buckets by length: pad each bucket's batch to its longest (bucket_by_sequence_length's "
            "pad_to_bucket_boundary=False, no fixed padded_shapes)" if buckets else "pad each batch to its longest "
            "(padded_batch with None on the time axis) or bucket by length (tf.data.Dataset.bucket_by_sequence_length)")
    return DiagnosisFinding(
        "fixed-padding", f"clips padded to a fixed {lengths} frames{where}, not to each batch's longest: "
        f"{padding.beyond_longest:.0%} of the padded frames lie past each batch's longest clip; batches are "
        f"{padding.efficiency:.0%} real frames, and would be {padding.to_longest:.0%} padded to their longest "
        f"({padding_source_words(padding)})", evidence, f"{less}, and keep the true lengths in the length tensor")


def when_waiting(topic: str, finding: str, evidence: dict, recommendation: str | None, waits: bool | None,
                 why_not: str, share: RoundsEstimate | None) -> DiagnosisFinding:
    """A graph finding recommending its change only when the step is measured to wait for input (waits), else
    saying why_not; the input-bound share, where measured, is its interval."""
    if share is not None:
        evidence = {**evidence, "input_bound_share": share.median}
    if waits and recommendation:
        waiting = "the step waits for input" + ("" if share is None else f" ({share.median:.0%})")
        return DiagnosisFinding(topic, f"{finding}; {waiting}", evidence, recommendation, share)
    return DiagnosisFinding(topic, f"{finding}; {why_not}", evidence, None, share)


def python_op_finding(op: PythonOp, waits: bool | None, why_not: str,
                      share: RoundsEstimate | None = None) -> DiagnosisFinding:
    """A Python-function op (Python for every element, under the GIL), as when_waiting words it."""
    calls = (f" calling {op.python}" if op.python else "") + (f" ({op.defined_at})" if op.defined_at else "")
    return when_waiting("python-op", f"{op.op} op {op.node!r}{calls} runs Python for every element, under the GIL, "
                        f"in {op.transformation} ({op.transformation_node})",
                        {"transformation": op.transformation_node, "function": op.function, "python": op.python,
                         "defined_at": op.defined_at},
                        f"move {op.python or 'this function'} in {op.transformation} to TensorFlow ops (no GIL, runs "
                        "in parallel), or precompute its output", waits, why_not, share)


def prefetch_finding(last_stage: str | None, ends_with_prefetch: bool, inject_prefetch: bool, waits: bool | None,
                     why_not: str, share: RoundsEstimate | None = None) -> DiagnosisFinding | None:
    """No prefetch after last_stage, the last real stage (None: no stage), as when_waiting words it."""
    if ends_with_prefetch or last_stage is None:
        return None
    finding = f"no prefetch at the end of the pipeline (the last real stage is {last_stage})"
    evidence = {"last_transformation": last_stage, "inject_prefetch": inject_prefetch}
    if inject_prefetch:  # the measured figures already include the prefetch tf.data adds
        return when_waiting("prefetch", finding, evidence, None, waits, "tf.data's inject_prefetch (on) adds one "
                            "when the iterator starts, so the figures measured here include it", share)
    return when_waiting("prefetch", f"{finding}; inject_prefetch is off, so none is added at run time", evidence,
                        "end the pipeline with .prefetch(tf.data.AUTOTUNE), so batches are prepared while the step "
                        "runs", waits, why_not, share)
