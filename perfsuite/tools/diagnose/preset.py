"""`perfsuite diagnose DATA_DIR`: the dataset preset of the one diagnosis. perfsuite's TF-native WAV loader over the
user's directory is the pipeline, perfsuite's training step in graph mode the step; the other loaders (numpy_function,
the .npy cache) and step modes (XLA, eager) are alternatives, measured and ranked as fixes are. check-data runs first;
a dataset smaller than a round is measured on a repeated view (views.py)."""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.measure.step_model import StepModel
from perfsuite.measure.teardown import iterate
from perfsuite.tools.diagnose.attribution import MIN_READS
from perfsuite.tools.diagnose.fixes import RewriteComparison
from perfsuite.tools.diagnose.rewrite import Fix
from perfsuite.tools.diagnose.views import measured_data, readable_utterances, repeat_copies, round_samples
from perfsuite.verdict import diagnosis_figures as fig

BASE_MODE = "graph"
PRESET_FIXES_NEED = 6.0  # the fixes stage's need (run.STAGE_NEEDS) grows by this for the alternatives


@dataclass(frozen=True)
class Source:
    """What a diagnosis measures: the dataset, the step (None: none given), the record's parts found before any
    stage (the preset's data summary), alternatives(pipeline, batch) -> the comparisons of the fixes stage beyond
    the rewrites, and loader(batch_size=, workers=) for the sweep (None: the pipeline is the user's own)."""

    dataset: Any
    step: Callable | None
    parts: dict
    alternatives: Callable[[Any, Any], list] = lambda pipeline, batch: []
    loader: Callable | None = None


def preset_target(dataset_dir: Path, settings: fig.DiagnoseSettings) -> fig.Target:
    return fig.Target(pipeline="perfsuite loader tf_native-wav", step=f"perfsuite {settings.model} step ({BASE_MODE})",
                      args={}, dataset=str(dataset_dir))


@contextlib.contextmanager
def dataset_source(dataset_dir: Path, settings: fig.DiagnoseSettings, cache_dir: Path | None,
                   tell: Callable[[str], None]) -> Iterator[Source]:
    """The preset over dataset_dir: check-data, then the readable utterances (repeated where fewer than a round
    draws) through perfsuite's loaders, padded to their longest text and mel so the step traces once. DataError
    when nothing is usable."""
    from perfsuite.data.audio import MelConfig
    from perfsuite.data.loaders import check_dataset

    mel_config = MelConfig()
    tell("checking the data (check-data)")
    report = check_dataset(dataset_dir, cache_dir=cache_dir, mel_config=mel_config)
    records = readable_utterances(dataset_dir, mel_config)
    ids = [record.id for record in records]
    copies = repeat_copies(len(ids), settings)
    # A bad WAV can be listed twice (the WAV and its missing cache entry): count utterances, not problems.
    data = fig.DataSummary(checked=report.checked, usable=len(ids), skipped=report.checked - len(ids),
                           sources=tuple(report.sources),
                           problems=tuple(fig.Problem(path=p.path, reason=p.reason) for p in report.problems),
                           repeat=fig.Repeat(copies=copies, utterances_measured=copies * len(ids),
                                             round_samples=round_samples(settings)))
    shapes = fig.StaticShapes(max_text_len=max(len(r.tokens) for r in records),
                              max_mel_frames=max(r.mel_frames for r in records))
    with measured_data(dataset_dir, cache_dir, ids, copies, mel_config, tell) as (measured, cache_dir, cache):
        loader = _loader_factory(measured, cache_dir, settings, mel_config, shapes)
        steps = _steps(settings, shapes)
        batch = next(iterate(loader("tf_native", "wav")))  # its iterator torn down off this thread
        for mode in fig.ALTERNATIVE_MODES:  # their first calls (XLA's compile takes seconds) kept apart, as the base's
            first = StepModel(steps(mode), name=f"step-{mode}").first_calls(batch)
            tell(f"the step in {mode} mode: first call {first.first_s:.2f} s (trace, compile), then "
                 f"{first.steady_s:.3g} s: kept apart")
        yield Source(dataset=loader("tf_native", "wav"), step=steps(BASE_MODE),
                     parts={"data": data, "cache": cache, "static_shapes": shapes},
                     alternatives=lambda pipeline, batch: _alternatives(pipeline, batch, loader, steps, settings),
                     loader=lambda **setting: loader("tf_native", "wav", **setting))


def _alternatives(pipeline, batch, loader, steps, settings: fig.DiagnoseSettings) -> list:
    """The fixes stage's comparisons of the other loaders (each read alone) and step modes (on one batch)."""
    def other(kind: str, source: str, words: str) -> Fix:
        return Fix(f"loader {kind}-{source}", words, lambda _: (loader(kind, source), lambda: None))

    loaders = [RewriteComparison(other(kind, source, words), pipeline, f"loader {kind}-{source}",
                                 warmup=settings.warmup, step=None)
               for (kind, source), words in fig.ALTERNATIVE_LOADERS.items()]
    return loaders + [StepModeComparison(mode, words, steps, batch) for mode, words in fig.ALTERNATIVE_MODES.items()]


def _loader_factory(dataset_dir: Path, cache_dir: Path, settings: fig.DiagnoseSettings, mel_config, shapes):
    """loader(kind, source, batch_size=, workers=): its repeated tf.data pipeline, padded to the static shapes;
    built once per setting (building one reads every file's header)."""
    from perfsuite.data.loaders import LoaderConfig, build_loader

    built = {}

    def loader(kind: str, source: str, *, batch_size: int = settings.batch_size, workers: int = settings.workers):
        key = (kind, source, batch_size, workers)
        if key not in built:
            config = LoaderConfig(kind=kind, source=source, batch_size=batch_size, num_parallel_calls=workers,
                                  static_shapes=True, max_text_len=shapes.max_text_len,
                                  max_mel_frames=shapes.max_mel_frames, on_error="skip")
            built[key] = build_loader(dataset_dir=dataset_dir, config=config, cache_dir=cache_dir,
                                      mel_config=mel_config).dataset.repeat()
        return built[key]

    return loader


def _steps(settings: fig.DiagnoseSettings, shapes: fig.StaticShapes) -> Callable[[str], Callable]:
    """steps(mode): perfsuite's training step in that mode, made once, on the preset's static shapes."""
    from perfsuite.workload.model import MODEL_PRESETS, make_train_step

    return functools.cache(lambda mode: make_train_step(model_config=MODEL_PRESETS[settings.model], mode=mode,
                                                        input_shapes=(None, shapes.max_text_len,
                                                                      shapes.max_mel_frames)))


class StepModeComparison:
    """A step mode against the base mode, each called on one fixed batch (a fixes-stage comparison: see
    fixes.FixRounds). Both modes made their first calls (trace, compile) in the start-up."""

    warmup_rounds = 0
    unit = "steps/s of the step on one fixed batch"

    def __init__(self, mode: str, words: str, steps: Callable[[str], Callable], batch):
        self.name, self.words, self.steps, self.batch, self.mode = f"step {mode}", words, steps, batch, mode
        self.sides = {}

    def prepare(self) -> None:
        self.sides = {side: StepModel(self.steps(mode), name=f"step-{mode}")
                      for side, mode in (("before", BASE_MODE), ("after", self.mode))}

    def rate(self, side: str, read_s: float) -> float:
        return self.sides[side].calls(itertools.repeat(self.batch), count=MIN_READS, at_least_s=read_s).per_s

    def close(self) -> None:
        self.sides = {}
