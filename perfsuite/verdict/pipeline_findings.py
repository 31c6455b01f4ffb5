"""The findings of diagnose --pipeline about a user's batches and graph, in words: the layout, speech figures
and padding, the graph as it runs, and the graph findings recommended only when the step waits for input
(when_waiting). The ranking and the directions of recommendations are in perfsuite.verdict.diagnosis."""

from __future__ import annotations

from collections.abc import Callable

from perfsuite.measure.batch_spec import BatchLayout
from perfsuite.measure.speech import PaddingFigures
from perfsuite.verdict.diagnosis import estimate_evidence, span_words
from perfsuite.verdict.diagnosis_figures import DiagnosisFinding, RoundsEstimate, format_figure
from perfsuite.workload.pipeline_model import PythonOp

FIXED_PADDING_WASTE = 0.10  # padded frames past each batch's longest sample, as a share: padding to a fixed length


def layout_finding(layout: BatchLayout) -> DiagnosisFinding:
    """Which components were read as the audio and its lengths, by which rule; or, when none qualified,
    that audio seconds and padding are not measured."""
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
    """Audio seconds per second (when measured) and the padding efficiency with the lengths' source; padding
    None: a file written before the layout was recorded, with only its efficiency."""
    evidence, source = {"padding_efficiency": efficiency}, ""
    if padding is not None:
        evidence = {"padding_efficiency": padding.efficiency, "real_frames": padding.real_frames,
                    "padded_frames": padding.padded_frames, "batches": padding.batches,
                    "length_source": padding.source_words()}
        efficiency, source = padding.efficiency, f" ({padding_source_words(padding)})"
    words = f"batches are {efficiency:.0%} real frames, the rest padding{source}"
    if audio is None:
        return DiagnosisFinding("speech", words, evidence, None)
    return DiagnosisFinding("speech", f"{fmt(audio.median)} seconds of audio per second ({span_words(audio, fmt)}); "
                            f"{words}", {**estimate_evidence("audio_s_per_s", audio), **evidence}, None, audio)


def fixed_padding_finding(padding: PaddingFigures | None, graph_shapes: tuple[str, ...],
                          not_measured: str | None = None, *, buckets: bool = False) -> DiagnosisFinding | None:
    """Padding to a fixed length, named when at least FIXED_PADDING_WASTE of the padded frames lie past each
    batch's longest sample; graph_shapes: the graph's fixed padded_batch stages, in words, named without a
    figure when no batches were measured (not_measured says why). None: no such padding. buckets: the
    pipeline already batches by length, so it is never told to bucket."""
    shapes = "; ".join(graph_shapes)
    evidence = {"padded_batch": shapes or None}
    if padding is None:
        if not shapes:
            return None
        return DiagnosisFinding("fixed-padding", f"{shapes} pads to a fixed length; its waste is not measured: "
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


def prefetch_to_device_finding(after: tuple[str, ...]) -> DiagnosisFinding | None:
    """prefetch_to_device followed by real stages (TensorFlow requires it to be the last transformation)."""
    if not after:
        return None
    return DiagnosisFinding("prefetch-to-device", f"prefetch_to_device is not the last transformation: "
                            f"{' -> '.join(after)} follow(s) it; TensorFlow requires it last, so the stages after it "
                            "undo what it does", {"after": list(after)},
                            "move prefetch_to_device to the very end of the pipeline (after with_options is fine)")


def sequential_map_finding(maps: tuple[str, ...], waits: bool | None, why_not: str,
                           share: RoundsEstimate | None = None) -> DiagnosisFinding | None:
    """Maps without num_parallel_calls (one element at a time), as when_waiting words them."""
    if not maps:
        return None
    return when_waiting("parallelism", f"{len(maps)} map(s) run one element at a time (no num_parallel_calls): "
                        f"{', '.join(maps)}", {"maps": list(maps)},
                        "give each map num_parallel_calls=tf.data.AUTOTUNE", waits, why_not, share)


def when_waiting(topic: str, finding: str, evidence: dict, recommendation: str | None, waits: bool | None,
                 why_not: str, share: RoundsEstimate | None) -> DiagnosisFinding:
    """A graph finding whose change (recommendation) is recommended only when the step is measured to wait
    for input (waits), else why_not says why not; the input-bound share, where measured, is its interval."""
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
    """No prefetch after last_stage, the last real stage (None: no stage), as when_waiting words it; none is
    recommended with inject_prefetch on, as tf.data then adds one at run time."""
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


def graph_finding(chain: str, last_stage: str | None, read_from: str) -> DiagnosisFinding:
    """The graph as it runs, in words: its stages with their parallelism, buffers, cache and padding."""
    return DiagnosisFinding("graph", f"as it runs: {chain}", {"last_stage": last_stage, "read_from": read_from},
                            None)


def sequential_read_finding(reads: tuple[str, ...], waits: bool | None, why_not: str,
                            share: RoundsEstimate | None = None) -> DiagnosisFinding | None:
    """Files read one at a time (an interleave or flat_map over file readers without parallel calls), as
    when_waiting words it."""
    if not reads:
        return None
    return when_waiting("read-parallelism", f"files read one at a time: {'; '.join(reads)}", {"reads": list(reads)},
                        "read files in parallel: interleave(..., num_parallel_calls=tf.data.AUTOTUNE) or "
                        "TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)", waits, why_not, share)


def cache_after_repeat_finding(caches: tuple[str, ...]) -> DiagnosisFinding | None:
    """Caches after an endless repeat, which never serve from memory and grow until memory runs out."""
    if not caches:
        return None
    return DiagnosisFinding("cache-order", f"{'; '.join(caches)} comes after an endless repeat: it never completes "
                            "a pass, so it never serves an element from the cache, and it holds every element it "
                            "reads until memory runs out", {"caches": list(caches)},
                            "move .cache() before .repeat()")
