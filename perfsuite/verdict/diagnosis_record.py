"""The one record of a diagnosis (tools/diagnose/run.py), of a user's pipeline or of the dataset preset; its parts
are in diagnosis_figures.py. One schema: the files of both kinds before it (a dataset's, schema 4-8; a --pipeline
run's, 'kind': 'pipeline', schema 2-7) migrate into it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from perfsuite.measure.batch_spec import BatchLayout
from perfsuite.measure.machine import MachineFingerprint
from perfsuite.measure.timing import measurement_from_times
from perfsuite.measure.utilisation import GpuTimeline, gpu_stats
from perfsuite.records import Record, RecordError, migrate, migration
from perfsuite.verdict.capacity import CapacityFigures
from perfsuite.verdict.diagnosis_figures import (
    ALTERNATIVE_LOADERS,
    ALTERNATIVE_MODES,
    Bottleneck,
    CacheUse,
    DataSummary,
    DiagnoseSettings,
    DiagnosisFinding,
    FeedFigures,
    FixGain,
    GpuFigures,
    GraphFindings,
    InputBoundFigures,
    StageRecord,
    StaticShapes,
    StepRun,
    SweepAxis,
    Target,
    Throughput,
    WorkFigures,
    estimate,
)

SCHEMA_VERSION = 9


@dataclass(frozen=True)
class Diagnosis(Record):
    """Everything one diagnosis inspected, measured and concluded. The measured parts are empty (or None) until
    their stage has ended (an interrupted run's checkpoint has complete=False) and where the run measures no such
    thing: data, cache, static_shapes and sweep belong to the dataset preset, step and input_bound need a step."""

    target: Target
    settings: DiagnoseSettings
    fingerprint: MachineFingerprint  # the machine's
    complete: bool
    elapsed_s: float
    stages: tuple[StageRecord, ...]  # those that ran, in order
    verdicts: tuple[DiagnosisFinding, ...]
    graph: GraphFindings | None = None  # None in a dataset file before schema 9
    layout: BatchLayout | None = None  # which component is the audio and its lengths, by which rule
    startup_s: float | None = None  # importing, building and the first batches, before any stage (kept apart)
    throughput: Throughput | None = None
    step: StepRun | None = None
    input_bound: InputBoundFigures | None = None
    bottleneck: Bottleneck | None = None  # the stage that limits throughput (attribution.BottleneckRounds)
    capacity: CapacityFigures | None = None  # stage costs, cores needed, the two-core check (verdict/capacity.py)
    fixes: tuple[FixGain, ...] = ()  # each change measured before and after: fixes and alternatives
    feed: FeedFigures | None = None
    work: WorkFigures | None = None  # the work fingerprints and the achieved float-op rates (diagnose/work.py)
    data: DataSummary | None = None  # the preset's: what check-data found
    cache: CacheUse | None = None  # the preset's .npy cache
    static_shapes: StaticShapes | None = None  # the preset's loaders pad to these
    sweep: tuple[SweepAxis, ...] = ()  # the preset's workers and batch-size sweeps
    gpu: GpuFigures | None = None  # GPU utilisation while the input-bound steps ran
    trace: str | None = None  # the profiler trace directory, if one was written

    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION

    @classmethod
    def from_dict(cls, data: Any, where: str = "diagnosis") -> Diagnosis:
        """Read back what as_dict() wrote, a file of either older kind through its migrations; RecordError names
        a wrong schema_version, kind or field."""
        if isinstance(data, dict) and data.get("kind") == "pipeline":
            data = {"schema_version": SCHEMA_VERSION, **migrate(_PipelineFile, data, where)}
        return super().from_dict(migrate(cls, data, where), where)


class _PipelineFile(Record):
    """The migrations of a --pipeline run's file (schema 2-7, 'kind': 'pipeline') up to the one record's."""

    SCHEMA_VERSION: ClassVar[int] = SCHEMA_VERSION


# ------------------------------------------------------------------- a --pipeline run's file, schema 2-7


@migration(_PipelineFile, 2, 3)
def _pipeline_2_to_3(data: dict) -> dict:
    """Schema 3 holds the feed rate as its record (the dataset kind's schema 6 change)."""
    return {**data, "feed": feed_figures_5_to_6(data["feed"])} if "feed" in data else data


@migration(_PipelineFile, 3, 4)
def _pipeline_3_to_4(data: dict) -> dict:
    """Schema 4 holds the feed round's utilisation statistics as their GpuStats (the dataset kind's schema 7)."""
    return {**data, "feed": gpu_stats_6_to_7(data["feed"])} if "feed" in data else data


# Schemas 5 (the input-bound wait share), 6 (start-up seconds, bottleneck, fixes, work) and 7 (capacity) only add
# fields; their defaults say 'not measured'.
for _old in (4, 5, 6):
    migration(_PipelineFile, _old, _old + 1)(lambda data: data)


@migration(_PipelineFile, 7, SCHEMA_VERSION)
def _pipeline_7_to_one(data: dict) -> dict:
    """A --pipeline run's record is the one record without its kind: its settings, its parts and their keys."""
    return {key: value for key, value in data.items() if key != "kind"}


# ------------------------------------------------------------------------ a dataset's file, schema 4-8


@migration(Diagnosis, 4, 5)
def _dataset_4_to_5(data: dict) -> dict:
    """Schema 5 names its kind ('dataset'), as a --pipeline run's file names 'pipeline'."""
    return {**data, "kind": "dataset"}


def _migrate_parts(data: Any, **parts) -> Any:
    """data (a JSON object) with each named part migrated: a list item by item, an object whole. Anything
    missing or mistyped is left for the validator to name."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for key, function in parts.items():
        if isinstance(data.get(key), list):
            data[key] = [function(item) for item in data[key]]
        elif isinstance(data.get(key), dict):
            data[key] = function(data[key])
    return data


@migration(Diagnosis, 5, 6)
def _dataset_5_to_6(data: dict) -> dict:
    """Schema 6 holds each feed rate as its record (FeedRate's fields), not its flat feed_* figures, and
    each utilisation timeline as its record (without the derived 'source' schema 5 wrote beside them)."""
    return _migrate_parts(data, gpu=_timeline_5_to_6, feed=feed_figures_5_to_6)


def _timeline_5_to_6(figures: Any) -> Any:
    if not (isinstance(figures, dict) and isinstance(figures.get("timeline"), dict)):
        return figures
    return {**figures, "timeline": {key: value for key, value in figures["timeline"].items() if key != "source"}}


# FeedRate's fields under their flat schema-5 names; the rest of those keys were derived from them.
_FEED_FIELDS_5 = {"target": "feed_target", "step_s": "feed_step_s", "step_low_s": "feed_step_low_s",
                  "step_high_s": "feed_step_high_s", "answers": "feed_answers_s",
                  "free_running_batch_s": "feed_free_running_batch_s",
                  "audio_s_per_batch": "feed_audio_s_per_batch", "trials": "feed_trials", "note": "feed_note"}


def feed_figures_5_to_6(figures: Any) -> Any:
    """One FeedFigures of diagnose schema 5 (pipeline schema 2): its feed as FeedRate's fields, its
    timeline without 'source'. A value that is not what schema 5 wrote is left for the validator to name."""
    if not (isinstance(figures, dict) and isinstance(figures.get("feed"), dict)):
        return figures
    flat = figures["feed"]
    feed = {name: flat[old] for name, old in _FEED_FIELDS_5.items() if old in flat}
    return _timeline_5_to_6({**figures, "feed": feed})


@migration(Diagnosis, 6, 7)
def _dataset_6_to_7(data: dict) -> dict:
    """Schema 7 holds every measured result as its record, not as flat figures read back by key: a
    loader's timing.Measurement, a sweep point's stats.PairedGain, the utilisation statistics as
    utilisation.GpuStats. The fingerprint and an emulated round's figures keep their shape."""
    return _migrate_parts(data, pipelines=_pipeline_6_to_7, gpu=gpu_stats_6_to_7, feed=gpu_stats_6_to_7,
                          sweep=lambda axis: _migrate_parts(axis, points=_point_6_to_7))


# Schema 8 adds each input-bound figure's wait share: a file before it has none (None), so nothing changes.
migration(Diagnosis, 7, 8)(lambda data: data)


def _pipeline_6_to_7(figures: Any) -> Any:
    """A loader's flat Measurement figures (seconds) as the Measurement, rebuilt by the code that measured
    it from the stored batch times: the summary and the cycle follow from them. Schema 6 kept the
    samples of the whole window only; they are spread evenly over its batches."""
    if not (isinstance(figures, dict) and isinstance(figures.get("loader"), dict)):
        return figures
    flat = figures["loader"]
    try:
        batches, samples = len(flat["batch_s"]), flat["samples"]
        each, extra = divmod(samples, batches)
        loader = measurement_from_times(name=flat["name"], warmup_ns=[round(s * 1e9) for s in flat["warmup_s"]],
                                        batch_ns=[round(s * 1e9) for s in flat["batch_s"]],
                                        batch_samples=[each + (i < extra) for i in range(batches)],
                                        traces=flat["traces"], retraces=flat["retraces"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return figures  # not what schema 6 wrote: the validator names it
    return {**figures, "loader": loader.as_dict()}


# PairedGain's summary (stats.RatioSummary) under its flat schema-6 names.
_SUMMARY_6 = {"median": "ratio_median", "low": "ratio_low", "high": "ratio_high", "spread": "ratio_spread",
              "n": "rounds", "values": "ratios"}


def _point_6_to_7(point: Any) -> Any:
    if not (isinstance(point, dict) and isinstance(point.get("vs_current"), dict)):
        return point
    flat = point["vs_current"]
    gain = {key: value for key, value in flat.items() if key not in _SUMMARY_6.values()}
    gain["ratios"] = flat.get("ratios")
    gain["summary"] = {name: flat[old] for name, old in _SUMMARY_6.items() if old in flat}
    return {**point, "vs_current": gain}


def gpu_stats_6_to_7(figures: Any) -> Any:
    """GpuFigures or FeedFigures of diagnose schema 6 (pipeline schema 3): the flat gpu_* / emulated_*
    statistics as the GpuStats of the stored timeline, computed again as the run computed them (gpu_stats
    with its defaults; the emulated accelerator's are the same function)."""
    if not (isinstance(figures, dict) and isinstance(figures.get("stats"), dict)):
        return figures
    try:
        timeline = GpuTimeline.from_dict(figures.get("timeline"), "schema 6 timeline")
        return {**figures, "stats": gpu_stats(timeline).as_dict()}
    except (RecordError, ValueError):
        return figures  # not what schema 6 wrote: the validator names it


# The dataset's files measured every loader and step mode apart; the one record measures the preset's pipeline (the
# TF-native WAV loader) and the step in graph mode, and the other loaders and modes as alternatives (fixes).
_BASE_LOADER = {"kind": "tf_native", "source": "wav"}
_ALTERNATIVE_WORDS = {**{f"loader {kind}-{source}": words for (kind, source), words in ALTERNATIVE_LOADERS.items()},
                      **{f"step {mode}": words for mode, words in ALTERNATIVE_MODES.items()}}


@migration(Diagnosis, 8, SCHEMA_VERSION)
def _dataset_8_to_one(data: dict) -> dict:
    """A dataset's file as the one record: the TF-native WAV loader's figures as the pipeline's (its throughput,
    input-bound share, feed), the step's input-bound mode as the step, and the same-round ratios of the other
    loaders and modes as the gains of alternatives. What else was measured per loader is left out."""
    try:
        settings, step = data["settings"], data.get("step")
        base = next((p for p in data["pipelines"] if p["pipeline"] == _BASE_LOADER), None)
        bound = next((f for f in data["input_bound"] if f.get("pipeline") == _BASE_LOADER), None)
        feed = next((f for f in data["feed"] if f["pipeline"] == "tf_native-wav"), None)
        mode = None if step is None else step["modes"][step["input_bound_mode"]]
        return {
            "target": {"pipeline": "perfsuite loader tf_native-wav", "args": {}, "dataset": data["dataset"],
                       "step": None if step is None else f"perfsuite {settings['model']} step "
                                                         f"({step['input_bound_mode']})"},
            **{key: data[key] for key in ("settings", "fingerprint", "complete", "elapsed_s", "stages", "verdicts",
                                          "data", "cache", "static_shapes", "sweep", "gpu", "trace")},
            "throughput": None if base is None else _throughput_8(base, settings["batches"]),
            "step": None if mode is None else {"first_s": mode["first_s"], "first_steady_s": mode["first_steady_s"],
                                               "calls": len(mode["call_s"]), "traces": mode["traces"],
                                               "retraces": mode["retraces"]},
            "input_bound": None if bound is None else {k: v for k, v in bound.items() if k != "pipeline"},
            "feed": feed, "fixes": _alternatives_8(data["comparisons"], step),
        }
    except (KeyError, TypeError, StopIteration, ValueError):
        return data  # not what schema 8 wrote: the validator names it


def _throughput_8(figures: dict, batches: int) -> dict:
    loader = figures["loader"]
    return {"first_batch_s": loader["first_ns"] / 1e9, "warmup_s": [ns / 1e9 for ns in loader["warmup_ns"][1:]],
            "unit": "samples", "rate": figures["samples_per_s"], "variation": figures["variation"],
            "batches_per_round": batches, "batch_s": [ns / 1e9 for ns in loader["batch_ns"]],
            "cycle": loader["cycle"], "restarts": 0}


def _alternatives_8(comparisons: list, step: dict | None) -> list:
    """Each other loader's and mode's per-round speed over the base's, from the same-round ratios stored."""
    ratios = {(c["a"]["kind"], c["a"]["source"], c["b"]["kind"], c["b"]["source"]): c["ratios"] for c in comparisons}
    per_round = {}
    if ("tf_native", "wav", "numpy_function", "wav") in ratios:
        per_round["loader numpy_function-wav"] = [1 / r for r in ratios["tf_native", "wav", "numpy_function", "wav"]]
    if ("tf_native", "cache", "tf_native", "wav") in ratios:
        cache = ratios["tf_native", "cache", "tf_native", "wav"]
        per_round["loader tf_native-cache"] = list(cache)
        if ("tf_native", "cache", "numpy_function", "cache") in ratios:  # the same rounds: ratios chain
            per_round["loader numpy_function-cache"] = [
                c / r for c, r in zip(cache, ratios["tf_native", "cache", "numpy_function", "cache"])]
    step_ratios = {} if step is None else step["ratios"]
    if "xla_over_graph" in step_ratios:
        per_round["step xla"] = list(step_ratios["xla_over_graph"]["rounds"])
    if "graph_over_eager" in step_ratios:
        per_round["step eager"] = [1 / r for r in step_ratios["graph_over_eager"]["rounds"]]
    return [{"name": name, "words": _ALTERNATIVE_WORDS[name], "applied": True,
             "unit": ("steps/s of the step on one fixed batch" if name.startswith("step")
                      else "samples/s of the pipeline"), "gain": estimate(values, (1.0,)).as_dict()}
            for name, values in per_round.items() if values]
