"""The self-test's measuring process: ``python -m perfsuite.tools.detection.worker KIND SPEC``.

Started by the command (gates_path, saved_path) so that the measuring runs in a fresh interpreter:
for ``saved`` every run is its own process, as a nightly job's runs are. SPEC is a JSON object:
``dataset_dir``, ``levels``, ``profile`` (a run profile name) and, for ``gates``, ``ratios`` (the
ratios.yaml path), ``trials`` and ``budget_s``. Each result is one JSON line on stdout (anything else
the process prints goes to stderr):

* ``saved``: one run. Every level's pipeline measured as one benchmark of a nightly run is: its
  rounds back to back on one iterator (the profile's round length and count), one level after the
  other in an order rotated from run to run; ``figures`` the median samples/s of each level's rounds
  (the run's figure), and ``time_ratios`` each planted level's time per sample over the genuine one's
  in one interleaved round after them (the plant's cost, paired within the round).
* ``gates``: one line per trial, then ``{"kind": "done"}``. A trial measures the gate's two sides as
  its benchmark does (a fresh iterator every round, planted loader over the compute ceiling, every
  level in the same rounds), the profile's rounds, then pairs of rounds while a level's gate is
  undecided, up to the profile's most; ``decisions`` the gate's verdict per level. No trial starts
  once the one before it would overrun ``budget_s``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

KINDS = ("saved", "gates")


def _emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def _round(profile, source, *, first: bool):
    """One round of a pipeline: the profile's warm-up (a whole warm-up at the first round of a
    continued iterator, one batch otherwise), then its steady batches; returns the Measurement."""
    from perfsuite.measure import timing

    return timing.measure_dataset(dataset=source, warmup_batches=profile.warmup_batches if first else 1,
                                  measure_batches=profile.measure_batches, min_seconds=profile.min_round_s)


def _continuing(profile, dataset):
    """A zero-argument round that continues one iterator over ``dataset`` across rounds."""
    from perfsuite.measure.teardown import iterate

    state = {"iterator": None}

    def one_round():
        first = state["iterator"] is None
        if first:
            state["iterator"] = iterate(dataset)
        return _round(profile, state["iterator"], first=first)

    return one_round


def _fresh(profile, dataset):
    """A zero-argument round over a fresh iterator of ``dataset`` (a benchmark's compare outside ab)."""
    return lambda: _round(profile, dataset, first=True)


def _time_ratios(values: dict, levels) -> dict:
    """Per planted level, each round's planted time over the genuine one (genuine samples/s over planted)."""
    genuine = np.asarray(values[str(0.0)])
    return {str(level): list(genuine / np.asarray(values[str(level)])) for level in levels if level > 0}


def run_saved(spec: dict) -> None:
    """One run: each level measured as one benchmark is, its rounds back to back on its own iterator
    (the profile's round length and count), the levels in an order rotated by ``run_index``."""
    from perfsuite.pytest_plugin.profiles import PROFILES
    from perfsuite.tools.detection.plant import planted_wav_dataset

    started = time.perf_counter()
    profile, levels = PROFILES[spec["profile"]], [float(level) for level in spec["levels"]]
    shift = int(spec.get("run_index", 0)) % len(levels)
    figures, rounds = {}, {}
    for level in levels[shift:] + levels[:shift]:
        one_round = _continuing(profile, planted_wav_dataset(Path(spec["dataset_dir"]), level))
        sizing = time.perf_counter()
        values = [one_round().samples_per_s]  # its whole warm-up, then the round that sizes the rest
        values += [one_round().samples_per_s for _ in range(profile.rounds_for(time.perf_counter() - sizing) - 1)]
        figures[str(level)], rounds[str(level)] = float(np.median(values)), len(values)
    _emit({"kind": "saved", "figures": figures, "rounds": rounds, "seconds": time.perf_counter() - started,
           "time_ratios": _plant_ratios(profile, Path(spec["dataset_dir"]), levels, shift)})


def _plant_ratios(profile, dataset_dir: Path, levels, shift: int) -> dict:
    """The plants' cost in this run: one interleaved round of every level (a fresh iterator each,
    forwards or backwards by ``shift``, so over the runs each level sits at the same mean position), each
    planted level's time per sample over the genuine one's. The run's figures come from levels measured
    one after the other, as a nightly run's benchmarks are; their ratio carries the drift between them,
    which can exceed a small plant (docs/selftest.md, "Each plant is checked")."""
    from perfsuite.measure import timing
    from perfsuite.tools.detection.plant import planted_wav_dataset

    runs = {str(level): _fresh(profile, planted_wav_dataset(dataset_dir, level)) for level in levels}
    result = timing.interleave_rounds(runs, rounds=1, warmup_rounds=0, start=shift)
    return _time_ratios(result.values, levels)


def _gate_decisions(ratios, metric: str, per_level: dict) -> dict:
    """The gate's verdict (pass, fail, inconclusive) on each level's per-round ratios, as a user's run
    decides it (check_benchmark: the interval of the median over the rounds)."""
    from perfsuite.verdict.gates import FAIL, INCONCLUSIVE, PASS, check_benchmark

    decisions = {}
    for label, values in per_level.items():
        check = check_benchmark(profile=None, ratios=ratios, benchmark_id=f"selftest::{metric}[{label}]",
                                metrics={metric: float(np.median(values))}, rounds={metric: list(values)})
        found = {verdict.decision for verdict in check.verdicts if verdict.metric == metric}
        decisions[label] = FAIL if FAIL in found else INCONCLUSIVE if INCONCLUSIVE in found else PASS
    return decisions


def _gate_trial(profile, runs: dict, levels, ratios, metric: str) -> dict:
    from perfsuite.measure import timing
    from perfsuite.verdict.gates import INCONCLUSIVE

    sizing = time.perf_counter()
    result = timing.interleave_rounds(runs, rounds=1, warmup_rounds=1)
    values = {label: list(result.values[label]) for label in runs}
    wanted = profile.rounds_for((time.perf_counter() - sizing) / (2 * len(runs)))

    def more(count: int) -> None:
        extra = timing.interleave_rounds(runs, rounds=count, warmup_rounds=0, start=1 + len(values["ceiling"]))
        for label in runs:
            values[label] += list(extra.values[label])

    if wanted > 1:
        more(wanted - 1)
    while True:
        ceiling = np.asarray(values["ceiling"])
        per_level = {str(level): list(np.asarray(values[str(level)]) / ceiling) for level in levels}
        decisions = _gate_decisions(ratios, metric, per_level)
        if INCONCLUSIVE not in decisions.values() or len(ceiling) + 2 > profile.max_rounds:
            break
        more(2)
    return {"decisions": decisions, "values": {k: float(np.median(v)) for k, v in per_level.items()},
            "time_ratios": _time_ratios(values, levels), "rounds": len(values["ceiling"])}


def run_gates(spec: dict) -> None:
    from perfsuite.pytest_plugin.profiles import PROFILES
    from perfsuite.tools.detection.plant import GATE_METRIC, compute_ceiling_dataset, planted_wav_dataset
    from perfsuite.verdict.baselines import load_ratios

    started = time.perf_counter()
    profile, levels = PROFILES[spec["profile"]], [float(level) for level in spec["levels"]]
    ratios = load_ratios(spec["ratios"])
    dataset_dir = Path(spec["dataset_dir"])
    runs = {"ceiling": _fresh(profile, compute_ceiling_dataset(dataset_dir))}
    runs |= {str(level): _fresh(profile, planted_wav_dataset(dataset_dir, level)) for level in levels}
    last_s = 0.0
    for trial in range(int(spec["trials"])):
        if time.perf_counter() - started + last_s > float(spec["budget_s"]):
            _emit({"kind": "done", "reason": f"the budget of {spec['budget_s']:.0f} s allowed {trial} trial(s)"})
            return
        begun = time.perf_counter()
        _emit({"kind": "gates", "trial": trial, **_gate_trial(profile, runs, levels, ratios, GATE_METRIC),
               "seconds": time.perf_counter() - begun})
        last_s = time.perf_counter() - begun
    _emit({"kind": "done", "reason": ""})


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in KINDS:
        print(f"usage: python -m perfsuite.tools.detection.worker {{{','.join(KINDS)}}} SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[1])
    (run_saved if argv[0] == "saved" else run_gates)(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
