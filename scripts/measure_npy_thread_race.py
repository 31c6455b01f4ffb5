"""Whether reading `.npy` files on several threads at once fails: np.load (its header evaluated by
ast.literal_eval) against perfsuite.data.npy.np_load (np.load, read again on CPython 3.11's spurious error).

    python scripts/measure_npy_thread_race.py [--seconds 20] [--threads 3]

Each reader runs on --threads threads for --seconds, reading one small `.npy` file in a loop; prints the
reads and the errors of each. The GIL is made to switch often (sys.setswitchinterval(1e-6), objects with
finalizers collected between reads), as a busy tf.data pipeline with many Python objects makes it switch:
CPython 3.11's AST constructor keeps one recursion count per interpreter, and a switch inside one parse
that lets another thread parse makes the first fail with "AST constructor recursion depth mismatch".
"""

import argparse
import gc
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from perfsuite.data.npy import np_load


class _Finalized:
    """A cycle with a finalizer: collecting it runs Python code, where the GIL can switch."""

    def __init__(self):
        self.me = self

    def __del__(self):
        sum(range(50))


def race(read, path: Path, *, seconds: float, threads: int) -> tuple[int, list[str]]:
    """(reads, errors) of `threads` threads calling read(path) for `seconds`."""
    stop, reads, errors = threading.Event(), [0], []

    def work():
        while not stop.is_set():
            _Finalized()
            try:
                read(path)
                reads[0] += 1
            except Exception as error:  # noqa: BLE001 -- counted, whatever it is: the point is whether any occur
                errors.append(f"{type(error).__name__}: {error}")

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    time.sleep(seconds)
    stop.set()
    for worker in workers:
        worker.join()
    return reads[0], errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=3)
    args = parser.parse_args()
    gc.set_threshold(50, 1, 1)
    sys.setswitchinterval(1e-6)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "mel.npy"
        np.save(path, np.zeros((123, 80), dtype=np.float32))
        print(f"Python {sys.version.split()[0]}, numpy {np.__version__}, {args.threads} threads, {args.seconds:g} s each")
        for name, read in (("np.load", np.load), ("np_load", np_load)):
            reads, errors = race(read, path, seconds=args.seconds, threads=args.threads)
            print(f"{name:9s} {reads:8d} reads, {len(errors):5d} errors {sorted({e[:70] for e in errors})[:2]}")


if __name__ == "__main__":
    main()
