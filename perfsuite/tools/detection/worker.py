"""The self-test's measuring process: ``python -m perfsuite.tools.detection.worker KIND SPEC``.

Started by the command (perfsuite.tools.detection.paths) so that the measuring runs in a fresh
interpreter: for ``saved`` every run is its own process, as a nightly job's runs are. SPEC is a JSON
object: ``dataset_dir``, ``levels`` and, for ``saved``, ``profile`` (a run profile name). Each result is
one JSON line on stdout (anything else the process prints goes to stderr):

* ``saved``: one run. Every level's pipeline measured as one benchmark of a nightly run is: its
  rounds back to back on one iterator (the profile's round length and count), one level after the
  other in an order rotated from run to run; ``figures`` the median samples/s of each level's rounds
  (the run's figure), and ``time_ratios`` each planted level's time per sample over the genuine one's
  in one interleaved round after them (the plant's cost, paired within the round).
* ``work``: every level's work fingerprint: its float ops per sample over the genuine one's, minus
  one (the plant's certified size), and whether comparing it with the genuine fingerprint fails.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path

import numpy as np

KINDS = ("saved", "work")


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
    """A zero-argument round over a fresh iterator of ``dataset`` (a benchmark's compare outside ab): its
    samples/s."""
    return lambda: _round(profile, dataset, first=True).samples_per_s


def _time_ratios(values: dict, levels) -> dict:
    """Per planted level, each round's planted time over the genuine one (genuine samples/s over planted)."""
    genuine = np.asarray(values[str(0.0)])
    return {str(level): list(genuine / np.asarray(values[str(level)])) for level in levels if level > 0}


def run_saved(spec: dict) -> None:
    """One run: each level measured as one benchmark is, its rounds back to back on its own iterator
    (the profile's round length and count), the levels in the order measure.rounds.rotated gives
    ``run_index``."""
    from perfsuite.measure.rounds import interleaved, planned, rotated
    from perfsuite.pytest_plugin.profiles import PROFILES
    from perfsuite.tools.detection.plant import planted_wav_dataset

    started = time.perf_counter()
    profile, levels = PROFILES[spec["profile"]], [float(level) for level in spec["levels"]]
    shift = int(spec.get("run_index", 0))

    def benchmark(level: float) -> list[float]:  # one level as one benchmark: its rounds back to back
        one_round = _continuing(profile, planted_wav_dataset(Path(spec["dataset_dir"]), level))
        sizing = time.perf_counter()
        values = [one_round().samples_per_s]  # its whole warm-up, then the round that sizes the rest
        more = profile.rounds_for(time.perf_counter() - sizing) - 1
        return values + planned(lambda index: one_round().samples_per_s, more)

    # The levels one after the other (benchmarks, not the runs of a round), in the order rotated gives run_index.
    values, _ = interleaved({str(level): functools.partial(benchmark, level) for level in levels}, rounds=1,
                            order=rotated, start=shift)
    figures = {level: float(np.median(runs[0])) for level, runs in values.items()}
    rounds = {level: len(runs[0]) for level, runs in values.items()}
    _emit({"kind": "saved", "figures": figures, "rounds": rounds, "seconds": time.perf_counter() - started,
           "time_ratios": _plant_ratios(profile, Path(spec["dataset_dir"]), levels, shift)})


def _plant_ratios(profile, dataset_dir: Path, levels, shift: int) -> dict:
    """The plants' cost in this run: one interleaved round of every level (a fresh iterator each,
    forwards or backwards by ``shift``, so over the runs each level sits at the same mean position), each
    planted level's time per sample over the genuine one's. The run's figures come from levels measured
    one after the other, as a nightly run's benchmarks are; their ratio carries the drift between them,
    which can exceed a small plant (docs/selftest.md, "Each plant is checked")."""
    from perfsuite.measure.rounds import interleaved
    from perfsuite.tools.detection.plant import planted_wav_dataset

    runs = {str(level): _fresh(profile, planted_wav_dataset(dataset_dir, level)) for level in levels}
    values, _ = interleaved(runs, rounds=1, start=shift)
    return _time_ratios(values, levels)


def run_work(spec: dict) -> None:
    """Every level's work fingerprint (perfsuite.measure.work) against the genuine one's: its float ops
    per sample over the genuine figure, minus one, and whether the fingerprint's comparison fails it,
    as a user's test_work.py would (verdict.work.compare_work)."""
    from perfsuite.measure.work import dataset_work
    from perfsuite.tools.detection.plant import planted_wav_dataset
    from perfsuite.verdict.work import compare_work

    started = time.perf_counter()
    dataset_dir, levels = Path(spec["dataset_dir"]), [float(level) for level in spec["levels"]]
    prints = {level: dataset_work(planted_wav_dataset(dataset_dir, level), name="selftest-plant").snapshot()
              for level in levels}
    genuine = prints[0.0]
    figure = "float_ops_per_sample"
    out = {}
    for level, found in prints.items():
        verdict = compare_work(found, genuine)
        out[str(level)] = {"work": found["work"][figure] / genuine["work"][figure] - 1, "flagged": verdict.failed,
                           "changes": list(verdict.changes)[:3]}
    _emit({"kind": "work", "levels": out, "seconds": time.perf_counter() - started})


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in KINDS:
        print(f"usage: python -m perfsuite.tools.detection.worker {{{','.join(KINDS)}}} SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[1])
    (run_saved if argv[0] == "saved" else run_work)(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
