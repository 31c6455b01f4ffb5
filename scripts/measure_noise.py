"""Where the timing noise of a tf.data pipeline lives on this machine: between fresh processes, between
iterators in one process, between rounds of one iterator, and what each candidate cause changes.

    python scripts/measure_noise.py [--processes 8] [--iterators 3] [--rounds 8] [--configs base,...]

The pipeline is the self-test's plant at 0 (perfsuite.tools.detection.plant: the TF-native WAV
loader, batch 20, 2 parallel calls, prefetch AUTOTUNE), as `perfsuite ab`'s self-test measures it.
Each process (a fresh interpreter, the configurations in the orders measure.rounds.rotated gives, so the
machine's drift reaches all alike) draws --iterators iterators in turn; each is warmed up (4 batches), then
timed for --rounds rounds of at least the configuration's round length. Figures are log samples/s, split
by a nested analysis of variance into SDs between processes, between iterators of one process and between
rounds of one iterator, each with a bootstrap interval over processes.

Configurations (one cause changed at a time against ``base``, round 0.2 s):
  base        as above
  round1s     rounds of at least 1 s            round2s  rounds of at least 2 s
  arms2       each round a second arm first (the compute ceiling), as an interleaved run does
  spill       the previous iterator dropped right before the next is timed (teardown in the rounds)
  noautotune  tf.data autotuning off (NOT a measurement-side setting: shown for the record)
  arena       glibc malloc in 1 arena (MALLOC_ARENA_MAX=1), a measurement-side allocator setting
  noaslr      address-space randomisation off for the process (setarch -R), measurement-side
The run log goes to docs/results/ by hand; the printed table is what it holds.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time

import numpy as np

CONFIGS = {
    "base": {}, "round1s": {"round_s": 1.0}, "round2s": {"round_s": 2.0}, "arms2": {"arms": 2},
    "spill": {"spill": True}, "noautotune": {"autotune": False}, "arena": {"env": {"MALLOC_ARENA_MAX": "1"}},
    "noaslr": {"setarch": True},
}


def child(config: dict, iterators: int, rounds: int, data_dir: str | None) -> dict:
    from pathlib import Path

    from perfsuite._tensorflow import tensorflow
    from perfsuite.measure.timing import measure_dataset
    from perfsuite.tools.detection.plant import compute_ceiling_dataset, corpus, planted_wav_dataset

    tf = tensorflow()
    directory = corpus(Path(data_dir) if data_dir else None)
    round_s = config.get("round_s", 0.2)
    other = iter(compute_ceiling_dataset(directory)) if config.get("arms", 1) > 1 else None
    if other is not None:
        measure_dataset(dataset=other, warmup_batches=4, measure_batches=1)
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    per_iterator, previous = [], None
    for _ in range(iterators):
        dataset = planted_wav_dataset(directory, 0.0)
        if not config.get("autotune", True):
            options = tf.data.Options()
            options.autotune.enabled = False
            dataset = dataset.with_options(options)
        iterator = iter(dataset)
        if config.get("spill"):
            previous = None  # dropped now: its teardown overlaps the rounds below
        measure_dataset(dataset=iterator, warmup_batches=4, measure_batches=1)
        rates = []
        for _ in range(rounds):
            if other is not None:
                measure_dataset(dataset=other, warmup_batches=1, measure_batches=2, min_seconds=round_s)
            rates.append(measure_dataset(dataset=iterator, warmup_batches=1, measure_batches=2,
                                         min_seconds=round_s).samples_per_s)
        per_iterator.append(rates)
        previous = iterator  # kept until the next iterator is warm (or dropped first under "spill")
    del previous
    return {"rates": per_iterator, "cpu_per_wall": (time.process_time() - cpu_start) / (time.perf_counter() - wall_start)}


def components(runs: list[list[list[float]]]) -> tuple[float, float, float]:
    """SDs (log scale) between processes, between iterators within a process, between rounds within an
    iterator, from the nested one-way analyses of variance (negative variance components read 0)."""
    logs = [np.log(np.array(process)) for process in runs]  # process x iterator x round
    k, r = logs[0].shape
    within_rounds = float(np.mean([np.var(it, ddof=1) for process in logs for it in process]))
    iterator_means = [process.mean(axis=1) for process in logs]
    var_iter_means = float(np.mean([np.var(means, ddof=1) for means in iterator_means])) if k > 1 else 0.0
    between_iterators = max(0.0, var_iter_means - within_rounds / r)
    process_means = np.array([process.mean() for process in logs])
    between_processes = max(0.0, float(np.var(process_means, ddof=1)) - var_iter_means / k)
    return math.sqrt(between_processes), math.sqrt(between_iterators), math.sqrt(within_rounds)


def bootstrap(runs, samples: int = 400, seed: int = 1) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    draws = [components([rng.choice(runs) for _ in runs]) for _ in range(samples)]
    return [(float(np.percentile(column, 5)), float(np.percentile(column, 95))) for column in zip(*draws)]


def run_child(name: str, args) -> dict:
    config = CONFIGS[name]
    command = [sys.executable, __file__, "--child", name, "--iterators", str(args.iterators),
               "--rounds", str(args.rounds)] + (["--data-dir", args.data_dir] if args.data_dir else [])
    if config.get("setarch") and shutil.which("setarch"):
        command = ["setarch", os.uname().machine, "-R", *command]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **config.get("env", {})}
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--iterators", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--configs", default="base,round1s,spill,arms2,noautotune,arena,noaslr")
    parser.add_argument("--data-dir")
    parser.add_argument("--json", help="write every process's rounds here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(CONFIGS[args.child], args.iterators, args.rounds, args.data_dir)))
        return
    names = [name.strip() for name in args.configs.split(",")]
    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        parser.error(f"--configs: expected names among {', '.join(CONFIGS)}, found {', '.join(unknown)}")
    from perfsuite.measure.rounds import InterleavedRounds, rotated

    processes = InterleavedRounds({name: functools.partial(run_child, name, args) for name in names}, order=rotated)
    runs = processes.values
    for index in range(args.processes):
        for name, result in processes.one_round().items():
            print(f"{name:10s} process {index + 1}: median {np.median(result['rates']):8.1f} samples/s, "
                  f"CPU/wall {result['cpu_per_wall']:.2f}", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(runs, stream)
    print(f"{'config':10s} {'median/s':>9s}  {'processes SD [90% CI]':>24s}  {'iterators SD':>22s}  {'rounds SD':>22s}")
    for name, results in runs.items():
        rates = [r["rates"] for r in results]
        sds, intervals = components(rates), bootstrap(rates)
        cells = [f"{sd:6.1%} [{lo:5.1%}, {hi:5.1%}]" for sd, (lo, hi) in zip(sds, intervals)]
        print(f"{name:10s} {np.median(rates):9.1f}  {cells[0]:>24s}  {cells[1]:>22s}  {cells[2]:>22s}")


if __name__ == "__main__":
    main()
