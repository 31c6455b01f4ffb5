"""The ``perfsuite`` fixture's object: measures through pytest-benchmark, collects metrics, judges them.

Metrics a benchmark records are of two kinds: figures (anything JSON-ready, all of it goes to
``extra_info``) and gated metrics (numbers named as the baselines name them: ``samples_per_s``,
``variation_ratio``, ``input_bound``, ``*_ratio``, ``gpu_*``, ``retraces``), which are checked against
the machine profile's thresholds and the ratio gates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsuite import stats, timing

# Gated metrics taken from a Measurement, by name.
MEASUREMENT_METRICS = ("samples_per_s", "batches_per_s", "variation_ratio", "robust_cv", "retraces")
# What --perfsuite-save-baselines records. Variation figures and input-bound shares swing by tens of
# percent between runs on a shared machine (and shares can be negative), so thresholds for them are
# set by hand in a profile file, and the same-run shares are gated in ratios.yaml instead.
RECORDED_METRICS = ("samples_per_s", "retraces")


@dataclass
class Outcome:
    """The verdicts of one benchmark, for the summary table and the pass/fail decision."""

    benchmark_id: str
    check: Any  # perfsuite.baselines.CheckResult
    metrics: dict
    comparison: stats.Comparison | None
    gates: str
    compare_fail: bool
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[tuple]:
        from perfsuite.plugin import format_number

        rows = []
        for verdict in self.check.verdicts:
            symbol = "≥" if verdict.kind == "min" else "≤"
            rows.append((self.benchmark_id, verdict.metric, format_number(verdict.measured),
                         f"{symbol} {format_number(verdict.threshold)}", "ok" if verdict.passed else "FAILED"))
        if self.comparison is not None:
            c = self.comparison
            verdict = f"{c.direction.upper() if c.significant else 'no significant change'}"
            rows.append((self.benchmark_id, "vs previous run", f"{c.effect:+.1%} (p={c.p_value:.2g})",
                         f"p < {c.alpha:g} and |change| ≥ {c.min_effect:.0%}", verdict))
        if not rows:
            rows.append((self.benchmark_id, "-", "-", "-", "no thresholds"))
        return rows

    def failure_messages(self) -> list[str]:
        messages = [verdict.message for verdict in self.check.failures]
        c = self.comparison
        if self.compare_fail and c is not None and c.significant and c.direction == "slower":
            messages.append(f"batch time vs previous run: {c.effect:+.1%} (p={c.p_value:.2g}), significantly slower")
        return messages

    def raise_for_failures(self) -> None:
        messages = self.failure_messages()
        if messages and self.gates == "enforce":
            raise AssertionError(f"{self.benchmark_id}: performance gate(s) failed:\n  " + "\n  ".join(messages))


class Recorder:
    """What a benchmark measures with; see the module docstring."""

    def __init__(self, *, benchmark, context, nodeid: str):
        self.benchmark = benchmark
        self.context = context
        self.profile = context.profile
        self.nodeid = nodeid
        # Thresholds depend on the corpus and rounds, so each run profile has its own entries.
        self.benchmark_id = f"{context.profile.name}::{nodeid.split('benchmarks/', 1)[-1]}"
        self.metrics: dict[str, float] = {}
        self.primary: timing.Measurement | None = None
        self.primary_unit = "batch"  # what one of the primary measurement's times is: a batch or a step call
        self.primary_round_lengths: list[int] | None = None  # its times per measurement round, when it has rounds
        self._benchmark_used = False

    # -------------------------------------------------------------------------------- measuring

    def measure_dataset(self, dataset, *, name: str, samples_in=None, readback=None) -> timing.Measurement:
        """Steady-state figures of a dataset: warm-up once, then profile.rounds rounds of measure_batches.

        The rounds go through pytest-benchmark (one round = measure_batches batches) so its table and
        comparison see them; the per-batch times of all rounds form the Measurement.
        """
        iterator = iter(dataset.repeat())
        kwargs = {"samples_in": samples_in, "readback": readback, "name": name}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        warm = timing.measure_dataset(dataset=iterator, warmup_batches=self.profile.warmup_batches,
                                      measure_batches=1, **kwargs)
        rounds = self._rounds(lambda: timing.measure_dataset(
            dataset=iterator, warmup_batches=1, measure_batches=self.profile.measure_batches,
            min_seconds=self.profile.min_round_s, **kwargs))
        self.primary_round_lengths = [len(r.batch_ns) for r in rounds]
        return self.record(timing.combine(rounds, name=name, first=warm))

    def measure_step(self, step, *, batches, name: str, readback=None) -> timing.Measurement:
        """Steady-state figures of a step: its first call (trace + compile) apart, then rounds of calls."""
        source = iter(batches)
        kwargs = {"readback": readback} if readback is not None else {}
        warm = timing.measure_step(step=step, batches=source, warmup_calls=max(self.profile.warmup_batches, 1),
                                   measure_calls=1, name=name, **kwargs)
        rounds = self._rounds(lambda: timing.measure_step(step=step, batches=source, warmup_calls=1,
                                                          measure_calls=self.profile.step_calls, name=name, **kwargs))
        self.primary_unit, self.primary_round_lengths = "call", [len(r.batch_ns) for r in rounds]
        return self.record(timing.combine(rounds, name=name, first=warm))

    def measure_input_bound(self, *, step, dataset, warmup: int, batches: int, rounds: int) -> timing.InputBound:
        """The step fed by ``dataset`` and by its synthetic twin; records ``input_bound`` (the share)."""
        results = []
        self._once(lambda: results.append(timing.measure_input_bound(step=step, dataset=dataset, warmup=warmup,
                                                                     batches=batches, rounds=rounds)))
        result = results[-1]
        self.record(result, prefix="input_bound_")
        self.add("input_bound", result.share)
        return result

    def measure_epoch(self, *, step, dataset, name: str) -> timing.Measurement:
        """One pass of ``dataset`` through ``step`` (first call apart); traces counted over the whole epoch."""
        batches = int(dataset.cardinality())
        if batches < 2:
            raise ValueError(f"dataset: expected a known number of batches ≥ 2 for an epoch, found {batches}")
        results = []
        self._once(lambda: results.append(timing.measure_step(step=step, batches=iter(dataset), warmup_calls=1,
                                                              measure_calls=batches - 1, name=name)))
        self.primary_unit = "call"
        return self.record(results[-1])

    def _rounds(self, measure_round) -> list[timing.Measurement]:
        results = []
        self._timed(lambda: results.append(measure_round()), rounds=self.profile.rounds)
        while len(results) < self.profile.rounds:  # pytest-benchmark disabled: it ran the target once
            results.append(measure_round())
        return results

    def _once(self, work) -> None:
        """Work timed as one round (an A/B comparison: the ratio is what counts, not the round's time)."""
        self._timed(work, rounds=1)

    def _timed(self, work, *, rounds: int) -> None:
        """The first measurement of a test goes through pytest-benchmark (which allows one); later ones run as is."""
        if self._benchmark_used:
            for _ in range(rounds):
                work()
            return
        self._benchmark_used = True
        self.benchmark.pedantic(work, rounds=rounds, iterations=1, warmup_rounds=0)

    def compare(self, name: str, *, a, b, rounds: int | None = None) -> timing.ABResult:
        """Interleaved A/B rounds; records the median per-pair ratio (A's speed over B's) as ``name``."""
        if "ratio" not in name:
            raise ValueError(f"name: expected a metric name containing 'ratio', found {name!r}")
        results = []
        self._once(lambda: results.append(
            timing.interleave(a=a, b=b, rounds=rounds or self.profile.rounds, warmup_rounds=1)))
        result = results[-1]
        self.add(name, result.summary.median, extra={f"{name}_detail": result.as_dict()})
        return result

    # -------------------------------------------------------------------------------- recording

    def record(self, figures, *, prefix: str = ""):
        """Attach figures (a Measurement, InputBound, GpuStats or dict) to extra_info.

        Without a prefix a Measurement is the benchmark's primary measurement: its gated metrics are
        checked and its per-batch times are compared with the previous run.
        """
        as_dict = figures.as_dict() if hasattr(figures, "as_dict") else dict(figures)
        for key, value in as_dict.items():
            self.benchmark.extra_info[f"{prefix}{key}"] = value
        if isinstance(figures, timing.Measurement) and not prefix:
            self.primary = figures
            for key in MEASUREMENT_METRICS:
                if as_dict.get(key) is not None:
                    self.metrics[key] = as_dict[key]
        return figures

    def add(self, name: str, value: float, *, extra: dict | None = None) -> None:
        """A gated metric, e.g. ``input_bound`` or ``tf_native_over_numpy_function_wav_ratio``."""
        self.metrics[name] = value
        self.benchmark.extra_info[name] = value
        for key, item in (extra or {}).items():
            self.benchmark.extra_info[key] = item

    def report_record(self) -> dict:
        """What --perfsuite-report plots of this benchmark (JSON-ready: it may travel from an xdist worker)."""
        ratio_rounds = {}
        for metric in self.metrics:
            detail = self.benchmark.extra_info.get(f"{metric}_detail")
            if isinstance(detail, dict) and detail.get("ratios"):
                ratio_rounds[metric] = list(detail["ratios"])
        return {"benchmark_id": self.benchmark_id, "nodeid": self.nodeid,
                "metrics": {k: v for k, v in self.metrics.items() if v is None or isinstance(v, int | float)},
                "measurement": None if self.primary is None else self.primary.as_dict(),
                "unit": self.primary_unit, "round_lengths": self.primary_round_lengths, "ratio_rounds": ratio_rounds}

    # -------------------------------------------------------------------------------- judging

    def judge(self, *, previous: dict | None, compared: bool) -> Outcome:
        """Verdicts against the baselines, and against ``previous`` (this benchmark in the loaded saved
        run, if ``compared``: a saved run was loaded by --benchmark-compare)."""
        from perfsuite import baselines

        context = self.context
        check = context.baselines.check(benchmark_id=self.benchmark_id, metrics=self.metrics)
        self.benchmark.extra_info["perfsuite_profile"] = self.profile.name
        self.benchmark.extra_info["perfsuite_verdicts"] = check.as_dict()
        outcome = Outcome(self.benchmark_id, check, dict(self.metrics), self._compare(previous), context.gates,
                          context.compare_fail, notes=list(check.notes))
        if compared and previous is None and self.primary is not None:
            outcome.notes.append("not in the saved run compared with (new benchmark?)")
        if context.save_baselines:
            self._save(baselines)
            outcome.notes.append(f"recorded into {self._baseline_path()}")
        return outcome

    def _compare(self, previous: dict | None) -> stats.Comparison | None:
        old = ((previous or {}).get("extra_info") or {}).get("batch_s")
        if self.primary is None or not old:
            return None
        comparison = stats.compare_samples(old=old, new=[ns / 1e9 for ns in self.primary.batch_ns],
                                           alpha=self.context.compare_alpha,
                                           min_effect=self.context.compare_min_effect)
        self.benchmark.extra_info["vs_previous"] = comparison.as_dict()
        return comparison

    def _baseline_path(self) -> Path:
        return self.context.baselines_dir / f"{self.context.baseline_profile}.yaml"

    def _save(self, baselines) -> None:
        metrics = {k: v for k, v in self.metrics.items()
                   if k in RECORDED_METRICS and v is not None and math.isfinite(v)}
        if metrics:
            baselines.record_measurements(self._baseline_path(), profile_name=self.context.baseline_profile,
                                          fingerprint=self.context.baselines.fingerprint,
                                          benchmark_id=self.benchmark_id, metrics=metrics,
                                          margin=self.context.margin)
