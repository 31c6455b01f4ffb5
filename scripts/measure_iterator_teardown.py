"""How long deleting a tf.data iterator takes after rounds with pauses between them, as a `perfsuite ab`
worker's rounds have (the other side measuring meanwhile).

    python scripts/measure_iterator_teardown.py --pause freeze --rounds 96

A child process iterates the TF-native WAV loader (default corpus, batch 16, 2 workers, prefetch
AUTOTUNE) in rounds of at least 0.25 s; between rounds it is frozen (SIGSTOP, continued 0.3 s later
by this process, as ab does), or sleeps 0.3 s, or goes straight on (--pause freeze|sleep|none). Then it
deletes the iterator and prints how long that took.
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def child(pause: str, rounds: int) -> None:
    from perfsuite.data.corpus import PRESETS, build_cache, build_corpus
    from perfsuite.data.loaders import LoaderConfig, build_loader
    from perfsuite.measure.timing import measure_dataset

    corpus = build_corpus(PRESETS["default"])
    config = LoaderConfig(kind="tf_native", source="wav", batch_size=16, num_parallel_calls=2)
    iterator = iter(build_loader(dataset_dir=corpus, cache_dir=build_cache(corpus), config=config).dataset.repeat())
    measure_dataset(dataset=iterator, warmup_batches=5, measure_batches=1)
    for _ in range(rounds):
        measure_dataset(dataset=iterator, warmup_batches=1, measure_batches=8, min_seconds=0.25)
        if pause == "freeze":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif pause == "sleep":
            time.sleep(0.3)
    start = time.perf_counter()
    del iterator
    print(f"pause {pause}, {rounds} rounds: deleting the iterator took {time.perf_counter() - start:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause", choices=("freeze", "sleep", "none"), default="freeze")
    parser.add_argument("--rounds", type=int, default=96)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.pause, args.rounds)
        return
    process = subprocess.Popen([sys.executable, __file__, "--child", "--pause", args.pause, "--rounds", str(args.rounds)])
    while True:  # continue the child 0.3 s after each time it freezes itself
        _, status = os.waitpid(process.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            break
        time.sleep(0.3)
        os.kill(process.pid, signal.SIGCONT)


if __name__ == "__main__":
    main()
