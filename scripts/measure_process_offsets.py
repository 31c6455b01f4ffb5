"""How much two processes of the same code differ: the TF-native cache loader's throughput in fresh
processes, one after another, with tf.data's autotuning on (the loader as benchmarked: prefetch
AUTOTUNE) and off (prefetch 4, ``options.autotune.enabled = False``), the two alternating so the
machine's drift reaches both alike.

    python scripts/measure_process_offsets.py [--processes 8] [--seconds 6]

Each process builds the default synthetic corpus's loader (batch 16, 2 workers), warms it up, then
times rounds of at least 0.2 s (the quick profile's) for --seconds. Per configuration it prints each
process's median samples/s, the SD of the processes' log medians (between processes) and the median
robust SD of the rounds within a process. Why: ``perfsuite ab`` decides over passes of fresh workers
because of this spread (docs/ab.md; the runs: docs/results/2026-11-23-machine-C.md).
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import time

CONFIGS = ("autotune", "fixed")


def one_process(config: str, seconds: float) -> list[float]:
    from perfsuite._tensorflow import tensorflow
    from perfsuite.data.corpus import PRESETS, build_cache, build_corpus
    from perfsuite.data.loaders import AUTOTUNE, LoaderConfig, build_loader
    from perfsuite.measure.timing import measure_dataset

    tf = tensorflow()
    corpus = build_corpus(PRESETS["default"])
    loader = LoaderConfig(kind="tf_native", source="cache", batch_size=16, num_parallel_calls=2,
                          prefetch=AUTOTUNE if config == "autotune" else 4)
    dataset = build_loader(dataset_dir=corpus, cache_dir=build_cache(corpus), config=loader).dataset
    if config == "fixed":
        options = tf.data.Options()
        options.autotune.enabled = False
        dataset = dataset.with_options(options)
    iterator = iter(dataset.repeat())
    measure_dataset(dataset=iterator, warmup_batches=20, measure_batches=1)
    rates, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        rates.append(measure_dataset(dataset=iterator, warmup_batches=1, measure_batches=8,
                                     min_seconds=0.2).samples_per_s)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8, help="processes per configuration")
    parser.add_argument("--seconds", type=float, default=6.0, help="measuring time per process")
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.child, args.seconds)))
        return
    runs = {config: [] for config in CONFIGS}
    for index in range(args.processes):
        for config in CONFIGS if index % 2 == 0 else CONFIGS[::-1]:
            out = subprocess.run([sys.executable, __file__, "--child", config, "--seconds", str(args.seconds)],
                                 capture_output=True, text=True, check=True)
            runs[config].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"{config:8s} process {index + 1}: {statistics.median(runs[config][-1]):,.0f} samples/s "
                  f"({len(runs[config][-1])} rounds)", flush=True)
    for config, rates in runs.items():
        logs = [[math.log(r) for r in process] for process in rates]
        medians = [statistics.median(process) for process in logs]
        within = statistics.median(1.4826 * statistics.median(abs(x - m) for x in process)
                                   for process, m in zip(logs, medians))
        print(f"{config:8s} median {math.exp(statistics.median(medians)):,.0f} samples/s; between processes SD "
              f"{statistics.stdev(medians):.1%}; rounds within a process robust SD {within:.1%}")


if __name__ == "__main__":
    main()
