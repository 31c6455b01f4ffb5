"""Check the NVML sampler and the GPU gates against a real GPU load whose busy and idle times are known.

A PyTorch matrix-product loop runs on the GPU in each case below, inside one GpuSampler window: idle,
busy throughout, and busy for a known share of every period (a planted on/off duty cycle; one case
polled instead of read from the driver's buffer). The host stamps the start and end of every busy
phase (the end after a synchronize), so each case's true busy share and period are known. Per case the
script prints what the sampler measured beside them, and the shipped GPU gates' verdicts
(benchmarks/baselines/ratios.yaml, judged as test_gpu_utilisation's figures are): the busy case must
pass them, the idle and duty-cycled ones fail them. Exit status 1 when any expectation fails.

Needs a CUDA GPU, PyTorch and nvidia-ml-py: a check for a GPU machine, not for CI.

    python scripts/validate_gpu_sampler.py --json gpu-sampler.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from perfsuite.measure.gpu import GpuSampler
from perfsuite.measure.utilisation import gpu_gate_metrics, gpu_stats
from perfsuite.verdict.baselines import load_ratios
from perfsuite.verdict.gates import check_benchmark

RATIOS = Path(__file__).resolve().parents[1] / "benchmarks" / "baselines" / "ratios.yaml"
BUSY_SHARE_TOLERANCE = 0.15  # |measured busy share - true busy share|
PERIOD_TOLERANCE = 0.15  # relative error of the detected period


@dataclass(frozen=True)
class Case:
    name: str
    seconds: float
    period_s: float | None = None  # None: one phase for the whole window
    busy_share: float = 0.0  # of each period (or of the window)
    driver_buffer: bool = True
    resolvable: bool = True  # False: a period shorter than NVML's sample period, no oscillation expected


CASES = (
    Case("idle", 5.0),
    Case("busy", 8.0, busy_share=1.0),
    Case("duty_50pct_1s", 20.0, period_s=1.0, busy_share=0.5),
    Case("duty_50pct_1s_polled", 20.0, period_s=1.0, busy_share=0.5, driver_buffer=False),
    Case("duty_25pct_2s", 24.0, period_s=2.0, busy_share=0.25),
    Case("duty_50pct_40ms", 10.0, period_s=0.04, busy_share=0.5, resolvable=False),  # a step-sized stall
)


def _busy(torch, a, b, seconds: float) -> None:
    """Matrix products queued back to back for ``seconds``, synchronized every four."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()


def run_case(torch, a, b, case: Case) -> dict:
    phases = []  # (start, end) of every busy phase, host clock
    with GpuSampler(use_driver_buffer=case.driver_buffer) as sampler:
        window_start, epoch_start = time.perf_counter(), time.time()
        period = case.period_s or case.seconds
        while time.perf_counter() - window_start < case.seconds - 1e-3:
            start = time.perf_counter()
            on = min(period * case.busy_share, case.seconds - (start - window_start))
            if on > 0:
                _busy(torch, a, b, on)
                phases.append((start, time.perf_counter()))
            rest = period - (time.perf_counter() - start)
            time.sleep(max(0.0, min(rest, case.seconds - (time.perf_counter() - window_start))))
        window_s = time.perf_counter() - window_start
    stats = gpu_stats(sampler.timeline)
    metrics = {name: float(value) for name, value in gpu_gate_metrics(stats).items()}
    verdicts = check_benchmark(profile=None, ratios=load_ratios(RATIOS), benchmark_id=case.name, metrics=metrics)
    true_busy = sum(end - start for start, end in phases) / window_s
    [series] = sampler.timeline.devices
    # Each utilisation value is the busy share of the driver's sample period, so their mean is the
    # window's busy share; the idle fraction (the gate's figure) counts samples, not time.
    return {"case": case.name, "planted_period_s": case.period_s, "true_busy_share": true_busy,
            "measured_busy_share": stats.util_mean / 100, "gates_passed": verdicts.passed,
            "gates": {v.metric: v.decision for v in verdicts.verdicts}, **stats.extra_info(),
            "util": list(series.util), "util_at_s": [round(t - epoch_start, 3) for t in series.util_timestamps]}


def expectations(case: Case, result: dict) -> list[tuple[str, bool]]:
    """What the sampler must show for this case: (what, held)."""
    checks = [("timeline complete", result["gpu_complete"])]
    if case.busy_share == 1.0:
        checks.append(("the busy GPU passes every GPU gate", result["gates_passed"]))
    else:
        checks.append(("the GPU gates fail", not result["gates_passed"]))
    if case.period_s is None:
        checks.append(("no oscillation in a steady load", not result["gpu_oscillation"]))
    else:
        error = abs(result["measured_busy_share"] - result["true_busy_share"])
        checks.append((f"busy share within {BUSY_SHARE_TOLERANCE} of the truth (off by {error:.3f})",
                       error <= BUSY_SHARE_TOLERANCE))
        period = result["gpu_oscillation_period_s"]
        if not case.resolvable:
            return checks
        checks.append((f"oscillation found with the planted period {case.period_s} s (found {period})",
                       bool(result["gpu_oscillation"]) and period is not None
                       and abs(period / case.period_s - 1) <= PERIOD_TOLERANCE))
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write every case's figures and checks here")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU visible to PyTorch: nothing to validate", file=sys.stderr)
        return 2
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    _busy(torch, a, b, 2.0)  # warm-up: cuBLAS handles, clocks up
    results, failed = [], 0
    for case in CASES:
        result = run_case(torch, a, b, case)
        result["checks"] = [{"what": what, "held": held} for what, held in expectations(case, result)]
        failed += sum(not c["held"] for c in result["checks"])
        results.append(result)
        print(f"{case.name}: source {result['gpu_source']}, {result['gpu_samples']} samples every "
              f"{result['gpu_sample_spacing_s']} s, util median {result['gpu_util_median']:.1f}, idle "
              f"fraction {result['gpu_idle_fraction']:.3f}, busy share (util mean) {result['measured_busy_share']:.3f} (true {result['true_busy_share']:.3f}), oscillation "
              f"{result['gpu_oscillation']} period {result['gpu_oscillation_period_s']} s, gates {result['gates']}")
        for check in result["checks"]:
            print(f"  {'ok  ' if check['held'] else 'FAIL'} {check['what']}")
    if args.json is not None:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(0), "cases": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
