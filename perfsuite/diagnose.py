"""`perfsuite diagnose`: measure a user's LJSpeech-layout dataset end to end and say what holds it back.

What is measured, on the readable files only (unreadable ones are listed by check_dataset first and
then skipped with on_error="skip"):
- the loaders: tf_native vs numpy_function, each from the WAVs and from the `.npy` cache (the user's
  cache, the default one under PATH/cache, or one built from the readable files in a temporary
  directory), as interleaved A/B rounds so that the ratios are steadier than absolute figures;
- the training step of a perfsuite.model preset in eager, graph and XLA modes on one fixed batch;
- the input-bound share of each pipeline: the fastest compiled step fed by the pipeline vs by its
  synthetic twin (timing.measure_input_bound);
- variation ratio and cycles of the per-batch times of each pipeline;
- a small sweep: tf_native WAV throughput vs workers and vs batch size, each axis's points measured
  in interleaved rounds (A B C, C B A, ...) so that every point has a same-round ratio to the user's
  current setting; a point is recommended only when it beats the current one beyond the
  round-to-round noise (stats.paired_gain);
- GPU utilisation while the input-bound steps run, when a GPU can be sampled.

A dataset too small to fill one measurement round at the largest batch size measured is measured on
a temporary view that lists each readable utterance several times (symlinks, repeated epochs), so that
batches are full; the JSON and a "data-size" finding say so.

Every loader uses static shapes (padded to the dataset's longest text and mel), so the compiled step
traces once; that is the setup a training run should use, and the retrace cost is reported separately.

verdicts() turns the figures into findings: each names its evidence, and a recommendation is given
only when the figures support it (thresholds below).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
KINDS = ("tf_native", "numpy_function")
SOURCES = ("wav", "cache")
STEP_MODES = ("eager", "graph", "xla")

# A speed-up below this is treated as noise: epoch-to-epoch variation on a shared box is 4-23 %,
# interleaved ratios are steadier, so 1.2x is clearly outside it.
MATERIAL_SPEEDUP = 1.2
# Step modes differ by less (DESIGN.md: eager 352 ms, graph 317 ms, XLA 243 ms), so 10 % counts there.
MATERIAL_STEP_SPEEDUP = 1.1
UNSTABLE_VARIATION = 0.10  # pyperf's stdev >= 10 % of the mean
# A sweep point is recommended over the current setting only when, in the same rounds, it is faster by
# a median of >= 10 %, in >= 80 % of the rounds, and a one-sided paired t-test on the log ratios gives
# p < 0.05 (stats.paired_gain).
SWEEP_MIN_GAIN = 0.10
SWEEP_MIN_WIN_SHARE = 0.8
SWEEP_ALPHA = 0.05
SWEEP_AXES = ("workers", "batch_size")
GPU_IDLE_MEDIAN_PCT = 50.0


@dataclass(frozen=True)
class DiagnoseSettings:
    """How much a diagnosis measures. batches: steady batches per round (rounds of them are joined for
    cycle detection, which needs >= 32 points). rounds: interleaved rounds of every comparison (loader
    pairs, and the sweep points of each axis; a sweep needs >= 2 for its paired test). The sweep axes
    always include the current workers / batch_size."""

    batch_size: int = 16
    workers: int = 2  # -1: AUTOTUNE
    model: str = "default"
    batches: int = 16
    warmup: int = 1
    rounds: int = 3
    sweep_workers: tuple[int, ...] = (1, 2, 4)
    sweep_batch_sizes: tuple[int, ...] = ()  # empty: half, the same and twice batch_size
    trace_steps: int = 3

    def __post_init__(self):
        for name in ("batch_size", "batches", "rounds", "trace_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, found {value!r}")
        if self.workers != -1 and self.workers < 1:
            raise ValueError(f"workers: expected an integer >= 1 or -1 (AUTOTUNE), found {self.workers!r}")
        if self.warmup < 1:
            raise ValueError(f"warmup: expected an integer >= 1, found {self.warmup!r}")
        if not self.sweep_batch_sizes:
            sizes = sorted({max(1, self.batch_size // 2), self.batch_size, self.batch_size * 2})
            object.__setattr__(self, "sweep_batch_sizes", tuple(sizes))

    def as_dict(self) -> dict:
        result = asdict(self)
        result["sweep_workers"] = list(self.sweep_workers)
        result["sweep_batch_sizes"] = list(self.sweep_batch_sizes)
        return result


@dataclass(frozen=True)
class Verdict:
    """One finding: topic (what was looked at), finding (in words), evidence (the figures behind it),
    recommendation (None when the figures call for no change)."""

    topic: str
    finding: str
    evidence: dict
    recommendation: str | None

    def as_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        figures = ", ".join(f"{key}={_fmt(value)}" for key, value in self.evidence.items())
        out = [f"[{self.topic}] {self.finding}", f"    evidence: {figures}"]
        if self.recommendation:
            out.append(f"    recommendation: {self.recommendation}")
        return out


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


Progress = Callable[[str], None]


# ------------------------------------------------------------------------------------------ the run


def diagnose(*, dataset_dir: Path, settings: DiagnoseSettings, cache_dir: Path | None = None,
             trace_dir: Path | None = None, progress: Progress = lambda stage: None) -> dict:
    """Measure dataset_dir and return every figure, the verdicts and the settings as a JSON-ready dict.

    Raises wav.DataError when the dataset as a whole is unusable (no metadata.csv, nothing readable).
    """
    from perfsuite.audio import MelConfig
    from perfsuite.baselines import machine_fingerprint
    from perfsuite.loaders import check_dataset

    dataset_dir = Path(dataset_dir)
    mel_config = MelConfig()
    progress("checking the data (check-data)")
    report = check_dataset(dataset_dir, cache_dir=cache_dir, mel_config=mel_config)
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "dataset": str(dataset_dir),
        "settings": settings.as_dict(),
        "fingerprint": machine_fingerprint().as_dict(),
        "data": {"checked": report.checked, "sources": list(report.sources),
                 "problems": [asdict(p) for p in report.problems]},
    }
    records = _readable(dataset_dir, mel_config)
    usable = len(records)
    # A bad WAV can be listed twice (the WAV and its missing cache entry): count utterances, not problems.
    result["data"]["usable"] = usable
    result["data"]["skipped"] = report.checked - usable
    copies = repeat_copies(usable, settings)
    result["data"]["repeat"] = {"copies": copies, "utterances_measured": copies * usable,
                                "round_samples": _round_samples(settings)}
    with _usable_cache(dataset_dir, cache_dir, mel_config, progress) as (cache, built):
        result["cache"] = {"dir": None if built else str(cache), "temporary": built}
        view = contextlib.nullcontext((dataset_dir, cache))
        if copies > 1:
            progress(f"only {usable} usable utterance(s): measuring on {copies} copies of each (repeated epochs)")
            view = _repeated_view(dataset_dir, cache, [r.id for r in records], copies)
        with view as (measured_dir, measured_cache):
            result.update(_measure(dataset_dir=measured_dir, cache_dir=measured_cache, settings=settings,
                                   mel_config=mel_config, trace_dir=trace_dir, progress=progress,
                                   limits=(max(len(r.tokens) for r in records), max(r.mel_frames for r in records))))
    result["verdicts"] = [v.as_dict() for v in verdicts(result)]
    return result


@contextlib.contextmanager
def _usable_cache(dataset_dir: Path, cache_dir: Path | None, mel_config, progress: Progress) -> Iterator:
    """(cache directory, whether it was built here): the given one, the default one, or a temporary one."""
    from perfsuite.corpus import default_cache_dir

    if cache_dir is not None:
        yield Path(cache_dir), False
        return
    if default_cache_dir(dataset_dir, mel_config).is_dir():
        yield default_cache_dir(dataset_dir, mel_config), False
        return
    with tempfile.TemporaryDirectory(prefix="perfsuite-diagnose-cache-") as temporary:
        progress("building a temporary .npy cache from the readable files")
        yield build_cache_of_readable(dataset_dir, cache_dir=Path(temporary), mel_config=mel_config), True


def build_cache_of_readable(dataset_dir: Path, *, cache_dir: Path, mel_config) -> Path:
    """Like corpus.build_cache, but only of the utterances whose WAV passes the loader's checks
    (build_cache stops at the first unreadable WAV)."""
    from perfsuite import text as text_codec
    from perfsuite.audio import log_mel_numpy
    from perfsuite.corpus import cache_paths, read_metadata, save_npy_atomic, wav_path
    from perfsuite.loaders import LoaderConfig, preflight
    from perfsuite.wav import read_wav

    config = LoaderConfig(kind="tf_native", source="wav", on_error="skip")
    records, _ = preflight(dataset_dir=dataset_dir, config=config, cache_dir=None, mel_config=mel_config)
    readable = {record.id for record in records}
    (cache_dir / "mels").mkdir(parents=True, exist_ok=True)
    (cache_dir / "tokens").mkdir(parents=True, exist_ok=True)
    for utt in read_metadata(dataset_dir):
        if utt.id not in readable:
            continue
        mel_path, tokens_path = cache_paths(cache_dir, utt.id)
        audio = read_wav(wav_path(dataset_dir, utt.id), sample_rate=mel_config.sample_rate)
        save_npy_atomic(mel_path, log_mel_numpy(audio, mel_config))
        save_npy_atomic(tokens_path, text_codec.encode(utt.normalized_text))
    return cache_dir


def _readable(dataset_dir: Path, mel_config) -> list:
    """The utterances whose WAV the loaders can read (their records: id, tokens, mel_frames)."""
    from perfsuite.loaders import LoaderConfig, preflight
    from perfsuite.wav import DataError

    config = LoaderConfig(kind="tf_native", source="wav", on_error="skip")
    records, skipped = preflight(dataset_dir=dataset_dir, config=config, cache_dir=None, mel_config=mel_config)
    if not records:
        raise DataError(dataset_dir, expected="at least one readable utterance", found=f"none ({len(skipped)} skipped)")
    return records


def _batch_sizes(settings: DiagnoseSettings) -> tuple[int, ...]:
    return tuple(sorted({settings.batch_size, *settings.sweep_batch_sizes}))


def _round_samples(settings: DiagnoseSettings) -> int:
    """Samples one measurement round draws at the largest batch size measured."""
    return max(_batch_sizes(settings)) * settings.batches


def repeat_copies(usable: int, settings: DiagnoseSettings) -> int:
    """How many times each usable utterance is listed for the measurements.

    1 when the utterances fill one measurement round at the largest batch size measured. Otherwise the
    fewest copies that do, with a total divisible by every batch size measured, so that every batch is
    full (a partial batch at each pass's end would recur at the same place in every round, a pattern
    cycle detection would report as a period) -- unless that would more than double the total (e.g. 511
    utterances and batch 32), where the fewest copies that fill a round are used.
    """
    if usable < 1:
        raise ValueError(f"usable: expected >= 1 utterance, found {usable}")
    needed = _round_samples(settings)
    if usable >= needed:
        return 1
    lcm = math.lcm(*_batch_sizes(settings))
    step = lcm // math.gcd(usable, lcm)
    full_batches = step * math.ceil(needed / (usable * step))
    return full_batches if full_batches * usable <= 2 * needed else math.ceil(needed / usable)


@contextlib.contextmanager
def _repeated_view(dataset_dir: Path, cache_dir: Path, ids: list[str], copies: int) -> Iterator:
    """(dataset dir, cache dir) of a temporary view listing each of ids `copies` times."""
    with tempfile.TemporaryDirectory(prefix="perfsuite-diagnose-repeated-") as temporary:
        root, cache = Path(temporary) / "data", Path(temporary) / "cache"
        write_repeated_view(dataset_dir, cache_dir, ids=ids, copies=copies, root=root, view_cache=cache)
        yield root, cache


def write_repeated_view(dataset_dir: Path, cache_dir: Path | None, *, ids: list[str], copies: int, root: Path,
                        view_cache: Path | None) -> list[str]:
    """An LJSpeech-layout directory at root whose metadata.csv lists each utterance of ids `copies`
    times under the ids `<id>__r<k>`, each WAV (and cache entry, into view_cache) a link to the
    original file. Returns the view's ids."""
    from perfsuite.corpus import cache_paths, read_metadata, wav_path

    utterances = {utt.id: utt for utt in read_metadata(dataset_dir)}
    (root / "wavs").mkdir(parents=True)
    if view_cache is not None:
        (view_cache / "mels").mkdir(parents=True)
        (view_cache / "tokens").mkdir(parents=True)
    width = len(str(copies - 1))
    lines, view_ids = [], []
    for copy in range(copies):
        for uid in ids:
            utt = utterances[uid]
            vid = f"{uid}__r{copy:0{width}d}"
            _link(wav_path(dataset_dir, uid), wav_path(root, vid))
            if view_cache is not None and cache_dir is not None:
                for source, target in zip(cache_paths(cache_dir, uid), cache_paths(view_cache, vid)):
                    _link(source, target)
            lines.append(f"{vid}|{utt.text}|{utt.normalized_text}\n")
            view_ids.append(vid)
    (root / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    return view_ids


def _link(source: Path, target: Path) -> None:
    """A symlink to source (absolute); a hard link or a copy where symlinks are not allowed."""
    source = Path(source).resolve()
    try:
        os.symlink(source, target)
    except OSError:
        try:
            os.link(source, target)
        except OSError:
            if source.exists():
                shutil.copyfile(source, target)


def _measure(*, dataset_dir, cache_dir, settings, mel_config, trace_dir, progress, limits) -> dict:
    from perfsuite.loaders import LoaderConfig, build_loader

    max_text, max_mel = limits

    def loader(kind: str, source: str, *, batch_size: int = settings.batch_size, workers: int = settings.workers):
        config = LoaderConfig(kind=kind, source=source, batch_size=batch_size, num_parallel_calls=workers,
                              static_shapes=True, max_text_len=max_text, max_mel_frames=max_mel, on_error="skip")
        return build_loader(dataset_dir=dataset_dir, config=config, cache_dir=cache_dir,
                            mel_config=mel_config).dataset.repeat()

    pipelines, comparisons = {}, {}
    for source in SOURCES:
        progress(f"measuring loaders from {source}: tf_native vs numpy_function, {settings.rounds} rounds")
        figures, ab = _compare_loaders(loader("tf_native", source), loader("numpy_function", source),
                                       names=(f"tf_native-{source}", f"numpy_function-{source}"), settings=settings)
        pipelines.update({name: {"loader": m} for name, m in figures.items()})
        comparisons[f"tf_native_vs_numpy_function-{source}"] = ab.as_dict()
    progress(f"measuring the {settings.model} training step: eager, graph, XLA")
    fixed_batch = next(iter(loader("tf_native", "cache")))
    steps, step_figures, step_ratios = _measure_steps(fixed_batch, settings=settings, shapes=(None, max_text, max_mel))
    best_mode = "xla" if step_ratios["xla_over_graph"]["median"] > 1 else "graph"
    gpu = _gpu_window()
    with gpu:
        for name in pipelines:
            progress(f"measuring the input-bound share of {name}")
            kind, source = name.split("-")
            pipelines[name]["input_bound"] = _input_bound(steps[best_mode], loader(kind, source), settings, name)
    sweep = {}
    for axis in SWEEP_AXES:
        progress(f"sweeping tf_native WAV throughput over {axis.replace('_', ' ')} ({settings.rounds} interleaved "
                 "rounds)")
        sweep[axis] = _sweep_axis(axis, loader, settings)
    trace = None
    if trace_dir is not None:
        progress(f"writing a profiler trace of {settings.trace_steps} steady steps to {trace_dir}")
        trace = _trace(steps[best_mode], loader("tf_native", "wav"), Path(trace_dir), settings.trace_steps)
    return {"static_shapes": {"max_text_len": max_text, "max_mel_frames": max_mel},
            "pipelines": {name: {"loader": p["loader"].as_dict(), "input_bound": p["input_bound"]}
                          for name, p in pipelines.items()},
            "comparisons": comparisons, "step": {"modes": step_figures, "ratios": step_ratios, "input_bound_mode": best_mode},
            "sweep": sweep, "gpu": gpu.result(), "trace": trace}


def _compare_loaders(a, b, *, names, settings):
    """Interleaved rounds of a and b; each side's rounds joined into one Measurement (first round = warm-up)."""
    from perfsuite import timing

    runs = {names[0]: [], names[1]: []}

    def side(dataset, name):
        def run():
            measurement = timing.measure_dataset(dataset=dataset, warmup_batches=settings.warmup,
                                                 measure_batches=settings.batches, name=name)
            runs[name].append(measurement)
            return measurement
        return run

    ab = timing.interleave(a=side(a, names[0]), b=side(b, names[1]), rounds=settings.rounds, warmup_rounds=1)
    figures = {name: timing.combine(rs[1:], name=name, first=rs[0]) for name, rs in runs.items()}
    return figures, ab


def _measure_steps(batch, *, settings, shapes):
    """Every mode's step on one fixed batch: the first calls (trace, compile) apart, then interleaved rounds
    (eager graph XLA, XLA graph eager, ...) of a few calls each, so the modes compare by same-round ratios."""
    from perfsuite import stats, timing
    from perfsuite.model import MODEL_PRESETS, make_train_step

    steps = {mode: make_train_step(model_config=MODEL_PRESETS[settings.model], mode=mode, input_shapes=shapes)
             for mode in STEP_MODES}
    first = {mode: timing.measure_step(step=step, batch=batch, warmup_calls=2, measure_calls=1, name=f"step-{mode}")
             for mode, step in steps.items()}
    calls = max(2, settings.batches // settings.rounds)
    measured = {mode: [] for mode in STEP_MODES}

    def one_round(mode):
        def run():
            measured[mode].append(timing.measure_step(step=steps[mode], batch=batch, warmup_calls=1,
                                                      measure_calls=calls, name=f"step-{mode}"))
            return measured[mode][-1]
        return run

    rounds = timing.interleave_rounds({mode: one_round(mode) for mode in STEP_MODES}, rounds=settings.rounds,
                                      warmup_rounds=0)
    figures = {mode: timing.combine(measured[mode], name=f"step-{mode}", first=first[mode]).as_dict()
               for mode in STEP_MODES}
    ratios = {}
    for name, (faster, slower) in {"graph_over_eager": ("graph", "eager"), "xla_over_graph": ("xla", "graph")}.items():
        per_round = stats.ratio_of(rounds.values[faster], rounds.values[slower])  # samples/s over samples/s
        ratios[name] = {"median": stats.ratio_summary(per_round).median, "rounds": list(per_round)}
    return steps, figures, ratios


def _input_bound(step, dataset, settings, name) -> dict:
    from perfsuite import timing

    figure = timing.measure_input_bound(step=step, dataset=dataset, warmup=settings.warmup,
                                        batches=settings.batches, rounds=max(2, settings.rounds - 1), name=name)
    return figure.as_dict()


def sweep_points(axis: str, settings: DiagnoseSettings) -> tuple[int, ...]:
    """The points of a sweep axis, the current setting included, in increasing order (AUTOTUNE first)."""
    if axis == "workers":
        return tuple(sorted({*settings.sweep_workers, settings.workers}))
    if axis == "batch_size":
        return tuple(sorted({*settings.sweep_batch_sizes, settings.batch_size}))
    raise ValueError(f"axis: expected one of {SWEEP_AXES}, found {axis!r}")


def _sweep_batches(axis: str, point: int, settings: DiagnoseSettings) -> int:
    """Steady batches per round: on the batch-size axis, about as many samples as the current batch size's
    round (so every point's round takes about as long), at least 2."""
    if axis == "workers":
        return settings.batches
    return max(2, round(settings.batches * settings.batch_size / point))


def _sweep_axis(axis: str, loader, settings: DiagnoseSettings) -> dict:
    """tf_native WAV samples/s at every point of an axis, in interleaved rounds (a fresh iterator per round,
    its first settings.warmup batches untimed)."""
    from perfsuite import timing

    def run(point):
        dataset = loader("tf_native", "wav", **{axis: point})
        batches = _sweep_batches(axis, point, settings)
        return lambda: timing.measure_dataset(dataset=dataset, warmup_batches=settings.warmup,
                                              measure_batches=batches, name=f"sweep-{axis}-{point}")

    points = sweep_points(axis, settings)
    rounds = timing.interleave_rounds({point: run(point) for point in points}, rounds=settings.rounds,
                                      warmup_rounds=1)
    current = settings.workers if axis == "workers" else settings.batch_size
    figures = sweep_figures(axis=axis, current=current, values=rounds.values)
    figures["order"] = [list(order) for order in rounds.order]
    figures["batches"] = {str(point): _sweep_batches(axis, point, settings) for point in points}
    return figures


def sweep_figures(*, axis: str, current: int, values: dict) -> dict:
    """JSON-ready figures of one sweep axis from per-round samples/s ({point: [per round]}, the same
    rounds for every point): per point the median, range and relative spread over the rounds and, for
    every point but the current one, the same-round ratios to the current point with their paired test
    (stats.paired_gain: significant means faster beyond the round-to-round noise)."""
    from perfsuite import stats

    if current not in values:
        raise ValueError(f"current: expected one of the measured points {sorted(values)}, found {current!r}")
    rows = []
    for point, per_round in values.items():
        per_round = [float(v) for v in per_round]
        median = float(statistics.median(per_round))
        row = {axis: point, "current": point == current, "samples_per_s": median,
               "samples_per_s_low": min(per_round), "samples_per_s_high": max(per_round),
               "samples_per_s_spread": (max(per_round) - min(per_round)) / median,
               "samples_per_s_rounds": per_round, "vs_current": None}
        if point != current:
            row["vs_current"] = stats.paired_gain(candidate=per_round, reference=values[current], alpha=SWEEP_ALPHA,
                                                  min_effect=SWEEP_MIN_GAIN,
                                                  min_win_share=SWEEP_MIN_WIN_SHARE).as_dict()
        rows.append(row)
    return {"axis": axis, "current": current, "rounds": len(values[current]), "min_gain": SWEEP_MIN_GAIN,
            "min_win_share": SWEEP_MIN_WIN_SHARE, "alpha": SWEEP_ALPHA, "points": rows}


def _trace(step, dataset, trace_dir: Path, steps: int) -> str:
    """A TensorBoard profiler trace of `steps` steady steps (two untimed steps first)."""
    from perfsuite import _tfenv  # noqa: F401, I001
    import tensorflow as tf

    iterator = iter(dataset)
    for _ in range(2):
        step(next(iterator)).numpy()
    trace_dir.mkdir(parents=True, exist_ok=True)
    tf.profiler.experimental.start(str(trace_dir))
    try:
        for _ in range(steps):
            step(next(iterator)).numpy()
    finally:
        tf.profiler.experimental.stop()
    return str(trace_dir)


class _gpu_window:
    """GPU sampling around a block when a GPU can be sampled; otherwise records why not."""

    def __init__(self):
        self._sampler = None
        self._reason = None

    def __enter__(self):
        from perfsuite.gpu import GpuSampler, GpuUnavailable

        sampler = GpuSampler()
        try:
            sampler.__enter__()
        except GpuUnavailable as error:
            self._reason = error.reason
            return self
        self._sampler = sampler
        return self

    def __exit__(self, *exc_info):
        if self._sampler is not None:
            return self._sampler.__exit__(*exc_info)
        return False

    def result(self) -> dict:
        if self._sampler is None:
            return {"available": False, "reason": self._reason}
        from perfsuite.gpu import gpu_stats

        timeline = self._sampler.timeline
        try:
            figures = gpu_stats(timeline).as_dict()
        except ValueError as error:  # sampled, but no utilisation sample fell in the window
            return {"available": True, "stats": None, "reason": str(error), "timeline": timeline.as_dict()}
        return {"available": True, "stats": figures, "timeline": timeline.as_dict()}


# ------------------------------------------------------------------------------------------ verdicts


def verdicts(result: dict) -> list[Verdict]:
    """Findings derived from a diagnosis' figures (the dict diagnose returns, or a hand-made subset:
    each rule looks only at the keys it needs and is skipped when they are absent)."""
    found: list[Verdict] = []
    for rule in (_data_verdict, _data_size_verdict, _loader_verdicts, _cache_verdict, _step_verdicts,
                 _input_bound_verdicts, _variation_verdicts, _sweep_verdicts, _gpu_verdict):
        found.extend(rule(result))
    return found


def _data_verdict(result):
    data = result.get("data")
    if not data or not data.get("skipped"):
        return []
    return [Verdict("data", f"{data['skipped']} unreadable file(s) skipped; measured on the rest",
                    {"checked": data["checked"], "skipped": data["skipped"], "usable": data.get("usable")},
                    "fix or convert the files listed by `perfsuite check-data` (16-bit PCM mono at the "
                    "expected sample rate); until then they are missing from training")]


def _data_size_verdict(result):
    data = result.get("data")
    repeat = (data or {}).get("repeat")
    if not repeat or repeat["copies"] <= 1:
        return []
    usable, copies = data["usable"], repeat["copies"]
    return [Verdict("data-size", f"only {usable} usable utterance(s), fewer than one measurement round draws "
                    f"({repeat['round_samples']} samples): measured on {copies} copies of each "
                    f"({repeat['utterances_measured']} per pass, epochs repeated) so that batches are full; "
                    f"the figures describe these {usable} files",
                    {"usable": usable, "copies": copies, "utterances_measured": repeat["utterances_measured"],
                     "round_samples": repeat["round_samples"]},
                    f"for figures that stand for a whole corpus, diagnose at least {repeat['round_samples']} of its "
                    "utterances (one round's worth), or measure fewer --batches")]


def _loader_verdicts(result):
    out = []
    for source in SOURCES:
        ab = result.get("comparisons", {}).get(f"tf_native_vs_numpy_function-{source}")
        if ab is None:
            continue
        ratio = ab["ratio_median"]
        evidence = {"tf_native_over_numpy_function": ratio, "ratio_low": ab["ratio_low"],
                    "ratio_high": ab["ratio_high"], "rounds": len(ab["ratios"])}
        if ratio >= MATERIAL_SPEEDUP:
            out.append(Verdict(f"loader-{source}", f"numpy_function {source} loader is {ratio:.1f}x slower than "
                               "tf_native", evidence,
                               f"switch the {source} loader to tf_native (graph ops: no GIL, no Python per sample)"))
        elif ratio <= 1 / MATERIAL_SPEEDUP:
            out.append(Verdict(f"loader-{source}", f"tf_native {source} loader is {1 / ratio:.1f}x slower than "
                               "numpy_function", evidence,
                               f"keep the numpy_function {source} loader on this machine"))
        else:
            out.append(Verdict(f"loader-{source}", f"tf_native and numpy_function {source} loaders are within "
                               f"{MATERIAL_SPEEDUP:.1f}x of each other ({ratio:.2f}x)", evidence, None))
    return out


def _cache_verdict(result):
    pipelines = result.get("pipelines", {})
    if "tf_native-wav" not in pipelines or "tf_native-cache" not in pipelines:
        return []
    wav = pipelines["tf_native-wav"]["loader"]["samples_per_s"]
    cache = pipelines["tf_native-cache"]["loader"]["samples_per_s"]
    ratio = cache / wav
    evidence = {"tf_native_wav_samples_per_s": wav, "tf_native_cache_samples_per_s": cache, "cache_over_wav": ratio}
    if ratio >= MATERIAL_SPEEDUP:
        return [Verdict("cache", f"the .npy cache loads {ratio:.1f}x faster than decoding WAVs", evidence,
                        "precompute the mels once (perfsuite.corpus.build_cache) and train from the cache")]
    return [Verdict("cache", f"the .npy cache is not materially faster than the WAVs ({ratio:.2f}x)", evidence, None)]


def _step_verdicts(result):
    modes, ratios = result.get("step", {}).get("modes"), result.get("step", {}).get("ratios")
    if not modes:
        return []
    evidence = {f"{mode}_step_s": modes[mode]["batch_mean_s"] for mode in STEP_MODES}
    evidence.update({f"{name}_per_round": [round(r, 3) for r in ratio["rounds"]] for name, ratio in ratios.items()})
    evidence["xla_first_call_s"] = modes["xla"]["first_s"]
    out = []
    # Same-round ratios (the modes ran interleaved), not ratios of means taken at different times.
    graph_gain, xla_gain = ratios["graph_over_eager"]["median"], ratios["xla_over_graph"]["median"]
    if graph_gain >= MATERIAL_STEP_SPEEDUP:
        out.append(Verdict("step", f"eager step is {graph_gain:.1f}x slower than tf.function", evidence,
                           "wrap the training step in tf.function"))
    if xla_gain >= MATERIAL_STEP_SPEEDUP:
        out.append(Verdict("step", f"XLA step is {xla_gain:.1f}x faster than graph mode (first call "
                           f"{modes['xla']['first_s']:.2f} s)", evidence,
                           "compile the step with tf.function(jit_compile=True) and static input shapes"))
    elif xla_gain <= 1 / MATERIAL_STEP_SPEEDUP:
        out.append(Verdict("step", f"XLA step is {1 / xla_gain:.1f}x slower than graph mode", evidence,
                           "keep jit_compile off for this model on this machine"))
    if not out:
        out.append(Verdict("step", "eager, graph and XLA steps are within "
                           f"{MATERIAL_STEP_SPEEDUP:.1f}x of each other", evidence, None))
    retraces = {mode: modes[mode].get("retraces") for mode in ("graph", "xla")}
    if any(retraces.values()):
        out.append(Verdict("retracing", "the step retraced in the steady state", {"retraces": retraces},
                           "pad batches to static shapes (LoaderConfig(static_shapes=True)) or bucket lengths"))
    return out


def _input_bound_verdicts(result):
    from perfsuite.stats import classify_input_bound

    out = []
    pipelines = result.get("pipelines", {})
    shares = {name: p["input_bound"]["share"] for name, p in pipelines.items() if p.get("input_bound")}
    # The pipeline to move to: the fastest loader among those that keep the step fed.
    fed = [name for name, share in shares.items() if classify_input_bound(share) == "not input-bound"]
    best = max(fed, key=lambda name: pipelines[name]["loader"]["samples_per_s"]) if fed else None
    for name, share in shares.items():
        bound = pipelines[name]["input_bound"]
        label = classify_input_bound(share)
        evidence = {"share": share, "t_real_s": bound["t_real"], "t_synthetic_s": bound["t_synthetic"]}
        recommendation = None
        if label != "not input-bound":
            recommendation = (f"use the {best} pipeline (not input-bound: share {max(shares[best], 0):.0%})"
                              if best else
                              "the step waits for input: add parallel map calls, prefetch, or a faster loader")
        waits = (f"{share:.0%} of step time waits for input" if share >= 0 else
                 f"share {share:.0%}: fed faster than its synthetic twin, i.e. no measurable wait, the rest noise")
        out.append(Verdict(f"input-{name}", f"{name} is {label} ({waits})", evidence, recommendation))
    return out


def _variation_verdicts(result):
    out = []
    for name, pipeline in result.get("pipelines", {}).items():
        loader = pipeline["loader"]
        ratio = loader.get("variation_ratio")
        evidence = {"variation_ratio": ratio, "batches": loader["batches"], "cycle_period": loader["cycle_period"]}
        if loader.get("cycle_significant"):
            out.append(Verdict(f"cycle-{name}", f"{name}: per-batch times repeat every {loader['cycle_period']} "
                               "batches", evidence,
                               "periodic stalls: a slow element every period (long files, GC, a shared disk); "
                               "raise prefetch or parallelism so the stall is hidden"))
        elif ratio is not None and ratio >= UNSTABLE_VARIATION:
            out.append(Verdict(f"variation-{name}", f"{name}: per-batch times vary by {ratio:.0%} of the mean",
                               evidence, None))
    return out


def point_label(axis: str, point: int) -> str:
    if axis == "workers":
        return "AUTOTUNE workers" if point == -1 else f"{point} worker{'s' if point != 1 else ''}"
    return f"batch {point}"


def _sweep_verdicts(result):
    out = []
    for axis in SWEEP_AXES:
        figures = result.get("sweep", {}).get(axis)
        if not figures or not isinstance(figures, dict):
            continue
        rows = [row for row in figures["points"] if row["vs_current"] is not None]
        if not rows:
            continue
        current, rounds = figures["current"], figures["rounds"]
        clear = [row for row in rows if row["vs_current"]["significant"]]
        chosen = max(clear or rows, key=lambda row: row["vs_current"]["ratio_median"])
        gain = chosen["vs_current"]
        prefix = "w" if axis == "workers" else "bs"
        evidence = {f"{prefix}{row[axis]}_samples_per_s": row["samples_per_s"] for row in figures["points"]}
        evidence.update({"current": point_label(axis, current), "best": point_label(axis, chosen[axis]),
                         "ratio_median": gain["ratio_median"], "ratio_low": gain["ratio_low"],
                         "ratio_high": gain["ratio_high"], "rounds_faster": f"{gain['wins']}/{rounds}"})
        if gain["p_value"] is not None:
            evidence["p_value"] = gain["p_value"]
        per_round = (f"{gain['ratio_median']:.2f}x (per round {gain['ratio_low']:.2f}-{gain['ratio_high']:.2f}x, "
                     f"faster in {gain['wins']}/{rounds} rounds"
                     + (f", p={gain['p_value']:.2g})" if gain["p_value"] is not None else ")"))
        best, now = point_label(axis, chosen[axis]), point_label(axis, current)
        if clear:
            if axis == "workers":
                value = "tf.data.AUTOTUNE" if chosen[axis] == -1 else chosen[axis]
                recommendation = f"set num_parallel_calls={value}"
            else:
                recommendation = (f"batch {chosen[axis]} if the step is input-bound and training allows it "
                                  "(batch size also changes the optimisation)")
            out.append(Verdict(axis, f"the tf_native WAV loader with {best} delivers {per_round} the samples/s "
                               f"of the current {now}", evidence, recommendation))
        elif rounds < 2:
            out.append(Verdict(axis, f"one round only: no paired test, so no {axis.replace('_', ' ')} "
                               f"recommendation (best: {best} at {per_round} vs {now})", evidence, None))
        elif gain["ratio_median"] < 1:
            out.append(Verdict(axis, f"no {'worker count' if axis == 'workers' else 'batch size'} was faster "
                               f"than the current {now} in the same rounds (closest: {best} at {per_round})",
                               evidence, None))
        else:
            out.append(Verdict(axis, f"no {'worker count' if axis == 'workers' else 'batch size'} beats the "
                               f"current {now} beyond the "
                               f"round-to-round noise (best: {best} at {per_round}; a recommendation needs a "
                               f"median gain >= {SWEEP_MIN_GAIN:.0%}, >= {SWEEP_MIN_WIN_SHARE:.0%} of rounds "
                               f"faster and p < {SWEEP_ALPHA})", evidence, None))
    return out


def _gpu_verdict(result):
    gpu = result.get("gpu")
    if not gpu or not gpu.get("available") or not gpu.get("stats"):
        return []
    stats = gpu["stats"]
    evidence = {"util_median_pct": stats["gpu_util_median"], "idle_fraction": stats["gpu_idle_fraction"],
                "oscillation_period_s": stats["gpu_oscillation_period_s"]}
    if stats["gpu_util_median"] < GPU_IDLE_MEDIAN_PCT:
        return [Verdict("gpu", f"GPU busy only {stats['gpu_util_median']:.0f}% (median) while training", evidence,
                        "the GPU waits: see the input-bound findings above")]
    return [Verdict("gpu", f"GPU busy {stats['gpu_util_median']:.0f}% (median)", evidence, None)]
