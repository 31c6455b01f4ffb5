"""False-alarm and detection rates of the run-level history comparison on synthetic run-to-run noise.

    python scripts/comparison_rates.py [--trials 2000] [--benchmarks 20] [--alpha 0.05] [--min-effect 0.10]

For each noise CV (2, 5, 10, 20 %) and history length (3, 5, 10 earlier runs) it simulates runs of
--benchmarks benchmarks with log-normal run-to-run noise (perfsuite.verdict.comparison.simulate_rates):
A/A runs, and runs with one benchmark slowed by 10 % or 25 %. Prints the share of benchmark verdicts
flagged in A/A runs, the share of A/A runs with any flag (what fails CI), and the share of planted
slowdowns flagged, each with its 95 % Clopper-Pearson interval. Seeded; numpy and scipy only.
"""

import argparse
import time

from perfsuite.verdict.comparison import simulate_rates

NOISE_CVS = (0.02, 0.05, 0.10, 0.20)
HISTORY_RUNS = (3, 5, 10)
SLOWDOWNS = (0.10, 0.25)


def percent(estimate) -> str:
    return f"{100 * estimate.rate:6.2f} [{100 * estimate.ci_low:5.2f}, {100 * estimate.ci_high:6.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="simulated runs per row")
    parser.add_argument("--benchmarks", type=int, default=20, help="benchmarks compared per run (Holm's m)")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--min-effect", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"{args.trials} simulated runs per row, {args.benchmarks} benchmarks per run, alpha={args.alpha} "
          f"(Holm), min_effect={args.min_effect:.0%}, seed={args.seed}; rates in %, [95 % Clopper-Pearson]")
    header = (f"{'noise CV':>8} {'runs':>4} | {'A/A verdicts flagged':>24} | {'A/A runs with a flag':>24} | "
              + " | ".join(f"{f'{s:.0%} slowdown detected':>24}" for s in SLOWDOWNS))
    print(header)
    print("-" * len(header))
    for noise_cv in NOISE_CVS:
        for runs in HISTORY_RUNS:
            rates = simulate_rates(noise_cv=noise_cv, history_runs=runs, benchmarks=args.benchmarks,
                                   trials=args.trials, slowdowns=SLOWDOWNS, alpha=args.alpha,
                                   min_effect=args.min_effect, seed=args.seed)
            detected = " | ".join(f"{percent(estimate):>24}" for _, estimate in rates.detection)
            print(f"{noise_cv:>8.0%} {runs:>4} | {percent(rates.false_alarm):>24} | "
                  f"{percent(rates.run_false_alarm):>24} | {detected}")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
