"""The metrics registry: the one place that says what a gated metric means.

Every metric a benchmark gates or records is declared here once: which direction is better, its
unit, how it is shown, the floor of the allowance when a threshold is recorded from it, and whether
``--perfsuite-save-baselines`` records it. The recorder, the baseline files, the comparison with
earlier runs, the report and the summary look metrics up here instead of reading meaning into names.
``headline``: the column the terminal summary shows the metric under (empty: not a headline figure).

One JSON naming rule for every metric (pytest-benchmark's ``extra_info``): the flat key ``<name>`` holds
the figure; a metric measured over rounds adds ``<name>_rounds`` (each round's value) and
``<name>_interval`` (``[low, high]`` of the order-statistic interval of their median).
Families (``*_ratio``, ``*_input_bound``, ``*_input_wait``) cover the same-run ratios and shares a
benchmark names after what it compares; a project adds its own metrics with ``register``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfsuite.errors import PerfsuiteError

HIGHER, LOWER = "higher", "lower"
RATIO_UNIT = "x"


class UnknownMetric(PerfsuiteError, KeyError):
    """A metric name the registry does not declare."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Metric:
    """What one metric means. ``same_run``: a ratio or share of two things measured in the same run,
    so it holds across machines far better than an absolute figure and is judged by its per-round
    interval. ``floor``: the least allowance a recorded threshold gets (near-zero figures would
    otherwise produce thresholds that noise alone breaks)."""

    name: str
    better: str  # HIGHER or LOWER
    unit: str
    description: str
    recordable: bool = False
    same_run: bool = False
    floor: float = 0.0
    percent: bool = False  # shown as a percentage
    signed: bool = False  # a share read as a difference of two measured sides: noise can take it below 0
    headline: str = ""  # the summary's column for it ("" none)
    display_scale: float = 1.0  # what its value is multiplied by when shown (1e3: seconds shown as ms)

    def __post_init__(self):
        if self.better not in (HIGHER, LOWER):
            raise ValueError(f"{self.name}: better: expected {HIGHER!r} or {LOWER!r}, found {self.better!r}")

    @property
    def is_ratio(self) -> bool:
        """A same-run ratio of two speeds (plotted against 1.0 in the reports)."""
        return self.same_run and self.unit == RATIO_UNIT

    @property
    def threshold_kind(self) -> str:
        """The kind of threshold recorded for it: 'min' where higher is better, 'max' where lower is."""
        return "min" if self.better == HIGHER else "max"

    def worse(self, change: float) -> bool:
        """Whether a relative change of the figure (new / old - 1) goes the bad way."""
        return change < 0 if self.better == HIGHER else change > 0

    def display(self, value) -> str:
        """The value as the summary shows it, times ``display_scale`` (e.g. seconds shown as ms)."""
        return format_number(None if value is None else value * self.display_scale, percent=self.percent)


def format_number(value, *, percent: bool = False) -> str:
    """How figures are shown in the summary and the reports: 4 significant digits, '-' for none."""
    if value is None:
        return "-"
    if isinstance(value, (bool, int)):
        return str(int(value))
    if not math.isfinite(value):
        return str(value)
    return f"{value:.1%}" if percent else f"{value:.4g}"


_DECLARED = [
    Metric("samples_per_s", HIGHER, "samples/s", "steady-state samples per second", recordable=True,
           headline="samples/s"),
    Metric("batches_per_s", HIGHER, "batches/s", "steady-state batches (or step calls) per second"),
    Metric("audio_s_per_s", HIGHER, "audio-s/s", "seconds of audio delivered per second of wall time",
           headline="audio-s/s"),
    Metric("batch_p95_s", LOWER, "s", "95th percentile of the steady per-batch (per-call) times",
           headline="p95 ms", display_scale=1e3),
    Metric("first_s", LOWER, "s", "the first batch (or call: trace and compile), apart from the steady state",
           headline="first s"),
    Metric("variation_ratio", LOWER, "", "std / mean of the per-batch times", floor=0.02),
    Metric("robust_cv", LOWER, "", "1.4826 MAD / median of the per-batch times", floor=0.02),
    Metric("retraces", LOWER, "traces", "tf.function traces after the first call", recordable=True),
    Metric("traces", LOWER, "traces", "tf.function traces over the whole measurement"),
    Metric("input_bound", LOWER, "", "share of the fed step's time lost to its input (1 - t_synthetic / t_real: "
           "waiting and, on a CPU-only machine, the pipeline's CPU contention)", same_run=True, floor=0.02,
           percent=True, signed=True, headline="input-bound"),
    Metric("input_wait", LOWER, "", "share of the fed step's time spent fetching its batch (next() on the "
           "pipeline: the profiler's input time)", same_run=True, floor=0.02, percent=True, headline="input wait"),
    Metric("gpu_util_median", HIGHER, "%", "median GPU utilisation while the step runs", headline="util median"),
    Metric("gpu_util_mean", HIGHER, "%", "mean GPU utilisation while the step runs"),
    Metric("gpu_idle_fraction", LOWER, "", "share of samples with the GPU idle", floor=0.02, percent=True),
    Metric("gpu_oscillation", LOWER, "", "1 when the utilisation oscillates (a significant cycle), else 0"),
    Metric("gpu_complete", HIGHER, "",
           "1 when the sampler ran without an NVML error and its samples cover the window, else 0"),
    Metric("emulated_util_median", HIGHER, "%", "median utilisation of an emulated accelerator fed by the pipeline",
           headline="util median"),
    Metric("emulated_idle_fraction", LOWER, "", "share of samples with the emulated accelerator idle", floor=0.02,
           percent=True),
    Metric("emulated_oscillation", LOWER, "", "1 when the emulated accelerator's utilisation oscillates, else 0"),
    Metric("emulated_complete", HIGHER, "",
           "1 when the emulated timeline holds every step and accounts for its window, else 0"),
    Metric("emulated_busy_fraction", HIGHER, "", "share of the run the emulated accelerator spent in its steps",
           percent=True, headline="busy"),
    Metric("emulated_starved_util_median", HIGHER, "%",
           "median utilisation of the emulated fast step fed by the numpy_function WAV pipeline"),
    Metric("emulated_starved_idle_fraction", LOWER, "",
           "idle share of the emulated fast step fed by the numpy_function WAV pipeline", percent=True),
    Metric("emulated_starved_oscillation", LOWER, "",
           "1 when the emulated fast step fed by the numpy_function WAV pipeline oscillates, else 0"),
    Metric("emulated_starved_period_over_cycle", HIGHER, RATIO_UNIT,
           "that oscillation's detected period over the step loop's cycle (median batch wait + step); "
           "1 when the detector found the starvation's rhythm (gated from both sides)", same_run=True),
    Metric("selftest_gates_false_alarm_rate", LOWER, "", "self-test: unchanged-code trials the same-run gate failed",
           percent=True),
    Metric("selftest_saved_false_alarm_rate", LOWER, "",
           "self-test: unchanged-code runs the comparison with saved runs flagged", percent=True),
    Metric("selftest_saved_detection_20pct_rate", HIGHER, "",
           "self-test: runs with a planted 20 % slowdown the comparison with saved runs flagged", percent=True),
    Metric("selftest_ab_false_alarm_rate", LOWER, "", "self-test: A/A runs of perfsuite ab flagged slower",
           percent=True),
    Metric("selftest_ab_detection_10pct_rate", HIGHER, "",
           "self-test: perfsuite ab runs with a planted 10 % slowdown flagged slower", percent=True),
]
_REGISTRY: dict[str, Metric] = {metric.name: metric for metric in _DECLARED}

# Families: a benchmark names a same-run ratio or share after what it compares.
_FAMILIES = {
    "_ratio": lambda name: Metric(name, HIGHER, RATIO_UNIT, "same-run speed ratio: A's samples/s over B's, per round",
                                  same_run=True, headline="ratio"),
    "_input_bound": lambda name: Metric(name, LOWER, "", "same-run input-bound share of one pipeline",
                                        same_run=True, floor=0.02, percent=True, signed=True,
                                        headline="input-bound"),
    "_input_wait": lambda name: Metric(name, LOWER, "", "same-run input wait share of one pipeline",
                                       same_run=True, floor=0.02, percent=True, headline="input wait"),
}


def wait_metric_of(share_metric: str) -> str:
    """The input wait share recorded beside an input-bound share: ``<x>input_bound`` becomes
    ``<x>input_wait``; any other name ``<name>_input_wait``."""
    stem = share_metric.removesuffix("input_bound")
    return f"{stem}input_wait" if stem != share_metric else f"{share_metric}_input_wait"


def register(metric: Metric) -> Metric:
    """Declare a project's own metric (e.g. in its conftest.py); redeclaring a name differently is refused."""
    known = _REGISTRY.get(metric.name)
    if known is not None and known != metric:
        raise ValueError(f"{metric.name}: already declared as {known}; found a different declaration {metric}")
    _REGISTRY[metric.name] = metric
    return metric


def lookup(name: str) -> Metric:
    """The declaration of ``name``; UnknownMetric names the registry when it has none."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    for suffix, make in _FAMILIES.items():
        if name.endswith(suffix):
            return make(name)
    raise UnknownMetric(f"metric {name!r}: expected a metric declared in perfsuite.verdict.metrics "
                        f"(or by perfsuite.verdict.metrics.register), found none of that name")


def declared() -> tuple[Metric, ...]:
    """Every metric declared by name (the families not included)."""
    return tuple(_REGISTRY.values())


def is_declared(name: str) -> bool:
    try:
        lookup(name)
    except UnknownMetric:
        return False
    return True


def recordable(names) -> tuple[str, ...]:
    """The names among ``names`` that --perfsuite-save-baselines records."""
    return tuple(name for name in names if is_declared(name) and lookup(name).recordable)
