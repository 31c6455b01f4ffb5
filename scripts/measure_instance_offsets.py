"""Do two builds of the same pipeline differ inside one process as two processes do? Fresh processes
one after another, each building the TF-native loader (batch 16, 2 workers) --instances times: each
instance warmed up, then 6 rounds of at least 0.25 s, its median samples/s kept.

    python scripts/measure_instance_offsets.py [--processes 4] [--instances 6] [--source wav|cache]

Prints each process's instance medians, the SD of the instances within a process (log scale), and the
SD of the processes' means beside what the instances' spread alone predicts for it (SD / sqrt(instances)).
A between-process SD no larger than predicted says the offset belongs to the pipeline instance, not the
process; a larger one, that processes carry an offset of their own. Why ``perfsuite ab`` still starts fresh workers every pass
(its workers alternate, frozen in turn, and there passes in one worker shared an offset):
docs/results/2026-11-25-machine-D.md, "Why not reuse the workers".
"""

import argparse
import json
import math
import statistics
import subprocess
import sys

ROUNDS = 6


def one_process(instances: int, source: str) -> list[float]:
    from perfsuite.data.corpus import PRESETS, build_cache, build_corpus
    from perfsuite.data.loaders import AUTOTUNE, LoaderConfig, build_loader
    from perfsuite.measure.timing import measure_dataset

    corpus = build_corpus(PRESETS["default"])
    cache = build_cache(corpus)
    medians = []
    for _ in range(instances):
        config = LoaderConfig(kind="tf_native", source=source, batch_size=16, num_parallel_calls=2, prefetch=AUTOTUNE)
        iterator = iter(build_loader(dataset_dir=corpus, cache_dir=cache, config=config).dataset.repeat())
        measure_dataset(dataset=iterator, warmup_batches=20, measure_batches=1)
        medians.append(statistics.median(
            measure_dataset(dataset=iterator, warmup_batches=1, measure_batches=8, min_seconds=0.25).samples_per_s
            for _ in range(ROUNDS)))
        del iterator
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--instances", type=int, default=6, help="pipelines built one after another per process")
    parser.add_argument("--source", choices=("wav", "cache"), default="wav")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.instances, args.source)))
        return
    logs = []
    for index in range(args.processes):
        output = subprocess.run([sys.executable, __file__, "--child", "--instances", str(args.instances),
                                 "--source", args.source], capture_output=True, text=True, check=True).stdout
        medians = json.loads(output.strip().splitlines()[-1])
        logs.append([math.log(m) for m in medians])
        print(f"process {index + 1}: " + " ".join(f"{m:,.0f}" for m in medians)
              + f"  (SD {statistics.stdev(logs[-1]):.1%})", flush=True)
    within = statistics.mean(statistics.variance(one) for one in logs)
    print(f"instances within a process: SD {math.sqrt(within):.1%}; processes' means: SD "
          f"{statistics.stdev([statistics.mean(one) for one in logs]):.1%} (the instances alone predict "
          f"{math.sqrt(within / args.instances):.1%})")


if __name__ == "__main__":
    main()
