"""How close the emulated accelerator's `hold()` lasts to its target: the tables in docs/results/.

Per target: 5 holds to learn the wake-up lateness, then the host's wall time across each hold over the
target (median, p10, p90, worst), the process CPU over the wall time, and how many holds returned before
their step ended (must be 0). Run it on an idle machine, then beside a load, e.g. two
`python -c "while True: pass"` processes on a 2-core box.

    python scripts/measure_hold_accuracy.py
"""

import time

import numpy as np

from perfsuite.measure.emulated import EmulatedDevice

TARGETS = [(0.001, 200), (0.002, 100), (0.005, 60), (0.01, 40), (0.03, 20), (0.1, 10)]


def main() -> None:
    print("| target | holds | median | p10 | p90 | worst | process CPU / wall | early returns |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for target, holds in TARGETS:
        device = EmulatedDevice()
        for _ in range(5):
            device.hold(target)
        walls, early = [], 0
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(holds):
            asked = time.perf_counter()
            _, end = device.hold(target)
            done = time.perf_counter()
            early += done < end
            walls.append(done - asked)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        error = np.array(walls) / target - 1
        print(f"| {target * 1e3:g} ms | {holds} | {np.median(error):+.2%} | {np.percentile(error, 10):+.2%} | "
              f"{np.percentile(error, 90):+.2%} | {error.max():+.0%} | {cpu / wall:.1%} | {early} |")


if __name__ == "__main__":
    main()
