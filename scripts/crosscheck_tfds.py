"""Cross-check perfsuite's measure_dataset against tfds.benchmark on the same pipelines.

    python scripts/crosscheck_tfds.py [--rounds 5] [--warmup-batches 2] [--batches 32] [--tolerance 0.10]

Pipelines (default corpus, batch 16, 2 workers): the TF-native WAV and cache loaders and the raw read
of the cache files (the ceiling of tf_native_cache_over_raw_read_ratio). Each is measured by
perfsuite (warm-up batches apart, then the measured ones) and by tensorflow_datasets.benchmark's timing loop
(raw_benchmark; its first batch excluded), each on a fresh iterator of the same repeated dataset. All six runs go in
one interleaved schedule, forwards then backwards (perfsuite.measure.rounds.interleaved), one
discarded round first, so each harness runs first as often as the other.

Per pipeline it prints the median ratio perfsuite/tfds (samples/s over samples/s) with its
median_interval, and the harness overhead (timing.harness_overhead) against the median batch time.
tfds's own "lasts" figure divides all the examples, the first batch's included, by the time after
the first batch, one batch too many; the ratio uses the corrected rate and the uncorrected one is
printed beside it. Exits 1 unless every corrected median is within --tolerance of 1.

Needs the 'crosscheck' extra (tensorflow-datasets).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from perfsuite._tensorflow import tensorflow
from perfsuite.data.corpus import PRESETS, build_cache, build_corpus, cache_paths, read_metadata
from perfsuite.data.loaders import LoaderConfig, build_loader
from perfsuite.measure import stats, timing
from perfsuite.measure.rounds import interleaved

BATCH, WORKERS = 16, 2
PIPELINES = ("tf_native_wav", "tf_native_cache", "raw_read")


def raw_read_dataset(corpus, cache):
    """benchmarks/test_loaders.py's raw-read ceiling: the cache files read, nothing decoded."""
    tf = tensorflow()
    mels, tokens = zip(*(map(str, cache_paths(cache, utt.id)) for utt in read_metadata(corpus)))
    return (tf.data.Dataset.from_tensor_slices((list(mels), list(tokens)))
            .map(lambda mel, tok: (tf.io.read_file(mel), tf.io.read_file(tok)), num_parallel_calls=WORKERS)
            .batch(BATCH).prefetch(tf.data.AUTOTUNE))


def pipelines(corpus, cache) -> dict:
    """name -> repeated dataset, built once; every measurement makes its own iterator."""
    def loader(source):
        config = LoaderConfig(kind="tf_native", source=source, batch_size=BATCH, num_parallel_calls=WORKERS)
        return build_loader(dataset_dir=corpus, cache_dir=cache, config=config).dataset
    return {"tf_native_wav": loader("wav").repeat(), "tf_native_cache": loader("cache").repeat(),
            "raw_read": raw_read_dataset(corpus, cache).repeat()}


def tfds_rates(dataset, batches: int) -> tuple[float, float]:
    """(corrected, as tfds reports) samples/s after the first of batches + 1 batches.

    raw_benchmark is tfds.benchmark's timing loop without its pandas summary (tensorflow-datasets does
    not depend on pandas); "lasts" is computed as its stats() does.
    """
    from tensorflow_datasets.core.utils.benchmark import raw_benchmark

    raw = raw_benchmark(dataset, num_iter=batches + 1, batch_size=BATCH)
    seconds = raw.total_time_s(include_first=False)
    return (raw.num_iter - 1) * BATCH / seconds, raw.num_examples / seconds


def schedule(datasets: dict, *, rounds: int, warmup_batches: int, batches: int):
    """Interleaved rounds of every (pipeline, harness); values are seconds per sample."""
    tfds_reported = {name: [] for name in datasets}

    def perfsuite_run(name):
        return lambda: 1 / timing.measure_dataset(dataset=datasets[name], warmup_batches=warmup_batches,
                                                  measure_batches=batches, name=name).samples_per_s

    def tfds_run(name):
        def run():
            corrected, reported = tfds_rates(datasets[name], warmup_batches + batches - 1)
            tfds_reported[name].append(1 / reported)
            return 1 / corrected
        return run

    runs = {}
    for name in datasets:
        runs[(name, "perfsuite")] = perfsuite_run(name)
        runs[(name, "tfds")] = tfds_run(name)
    values, orders = interleaved(runs, rounds=rounds, warmup_rounds=1)
    reported = {name: per_round[-rounds:] for name, per_round in tfds_reported.items()}  # drop the warm-up round
    return values, orders, reported


def report(values, reported, overheads, *, tolerance: float) -> bool:
    ok = True
    print(f"{'pipeline':16} {'perfsuite/tfds':>14} {'95% interval':>17} {'vs tfds lasts':>13} "
          f"{'batch ms':>8} {'overhead ms':>11}  ratios")
    for name in PIPELINES:
        ps = np.asarray(values[(name, "perfsuite")])
        ratios = np.asarray(values[(name, "tfds")]) / ps  # speeds: perfsuite over tfds
        ratios_lasts = np.asarray(reported[name]) / ps
        interval = stats.median_interval(ratios)
        batch_ms = 1e3 * BATCH * float(np.median(ps))
        agrees = abs(interval.median - 1) <= tolerance
        ok &= agrees
        print(f"{name:16} {interval.median:14.3f} [{interval.low:6.3f}, {interval.high:6.3f}] "
              f"{float(np.median(ratios_lasts)):13.3f} {batch_ms:8.2f} {1e3 * overheads[name]:11.3f}  "
              f"{' '.join(f'{r:.3f}' for r in ratios)}{'' if agrees else '  OUTSIDE TOLERANCE'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9, help="measured rounds, after one discarded")
    parser.add_argument("--warmup-batches", type=int, default=2)
    parser.add_argument("--batches", type=int, default=256, help="measured batches per run (fast pipelines need rounds of a few hundred ms)")
    parser.add_argument("--tolerance", type=float, default=0.10, help="allowed |median ratio - 1|")
    args = parser.parse_args()
    corpus = build_corpus(PRESETS["default"])
    datasets = pipelines(corpus, build_cache(corpus))
    overheads = {name: timing.harness_overhead(dataset) for name, dataset in datasets.items()}
    values, orders, reported = schedule(datasets, rounds=args.rounds, warmup_batches=args.warmup_batches,
                                        batches=args.batches)
    ok = report(values, reported, overheads, tolerance=args.tolerance)
    print(f"order of the measured rounds: {' | '.join(','.join(f'{n}/{h}' for n, h in o) for o in orders[:2])} ...")
    print("agreement within" if ok else "DISAGREEMENT beyond", f"±{100 * args.tolerance:.0f} % on the median")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
