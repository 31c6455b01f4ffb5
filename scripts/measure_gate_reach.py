"""How large a loader slowdown the main job's checks fail on: plant it, run the benchmarks, read verdicts.

In a fresh clone of this repository's HEAD, per planted amount: ``perfsuite/data/loaders.py`` gets extra
work in every element of the TF-native loader of one source (``--plant``: see PLANTS), and the
benchmarks that read that loader run as a user runs them, judged by the shipped ``ratios.yaml`` gates
and by the stored-run comparison against ``--history`` unplanted runs saved first. A last unplanted run
(amount 0) is the control. The slowdown a plant causes is read from the runs, not assumed.

    python scripts/measure_gate_reach.py --source wav --plant mel --amounts 0.06,0.15,0.3 --out wav.json
    python scripts/measure_gate_reach.py --source cache --plant copies --amounts 1,4,16 --out cache.json

Printed: per run, each gate's figure, interval and verdict, and each plain loader's change against
its history with the comparison's verdict (Holm over the run's benchmarks, as the plugin decides).
docs/measurement.md ("What green rules out") has the summary, docs/results/2026-11-27-machine-E.md the runs.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ANCHOR = "        mel, tokens = load(element, mel_config)\n"
PLANTS = {  # the extra work per element, ``amount`` its size; the result is added times a run-time zero
    # the mel of a random signal ``amount`` times as long as the element's (the self-test's plant)
    "mel": ("            from perfsuite.tools.selftest import planted_slowdown\n"
            "            mel = planted_slowdown({amount}, mel_config)(mel, element)\n"),
    # ``amount`` copies of the element's mel summed: a few ops, so little fixed cost (for the fast cache loader)
    "copies": ("            rows = tf.cast(tf.cast(tf.shape(mel)[0], tf.float32) * {amount}, tf.int32)\n"
               "            copies = tf.tile(mel, [{whole}, 1])[:rows]\n"
               "            zero = tf.cast(tf.strings.length(element['path']) < 0, tf.float32)\n"
               "            mel = mel + zero * tf.reduce_sum(copies)\n"),
}
SELECTIONS = {  # the benchmarks that read the planted loader, and the gates they carry
    "wav": "(test_loader and tf_native-wav-bs16) or (test_loader_ratio and wav and not compute_ceiling_over "
           "and not cache_over)",
    "cache": "(test_loader and tf_native-cache-bs16) or (test_loader_ratio and (cache or raw_read))",
}
LOADERS = Path("perfsuite/data/loaders.py")


def _amounts(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or any(not 0 < v <= 1000 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive amounts up to 1000, comma-separated, found {text!r}")
    return values


def _plant(clone: Path, source: str, plant: str, amount: float) -> None:
    path = clone / LOADERS
    text = path.read_text()
    if text.count(ANCHOR) != 1:
        sys.exit(f"{path}: expected the line {ANCHOR.strip()!r} once to plant the slowdown, found it "
                 f"{text.count(ANCHOR)} times")
    guard = f"        if config.kind == 'tf_native' and config.source == {source!r}:  # planted by measure_gate_reach\n"
    work = PLANTS[plant].format(amount=amount, whole=math.ceil(amount))
    path.write_text(text.replace(ANCHOR, ANCHOR + guard + work))


def _run(clone: Path, selection: str, out: Path, *, save: bool, data_dir: Path | None) -> dict:
    command = [sys.executable, "-m", "pytest", "benchmarks/", "-k", selection, "-m", "not selftest", "-q",
               "-p", "no:randomly", "-p", "no:cacheprovider", f"--benchmark-json={out}",
               "--benchmark-autosave" if save else "--benchmark-compare"]
    if data_dir is not None:
        command.append(f"--perfsuite-data-dir={data_dir}")
    out.unlink(missing_ok=True)  # a file left by an earlier sweep must not pass for this run's
    start = time.monotonic()
    done = subprocess.run(command, cwd=clone, env={**os.environ, "PYTHONPATH": str(clone)},
                          capture_output=True, text=True, check=False)
    (out.with_suffix(".log")).write_text(done.stdout + done.stderr)
    if not out.exists():
        sys.exit(f"pytest wrote no {out} (exit {done.returncode}); its output: {out.with_suffix('.log')}")
    return {"exit": done.returncode, "wall_s": round(time.monotonic() - start, 1), **_read(out)}


def _read(path: Path) -> dict:
    from perfsuite.verdict.comparison import HistoryComparison, decide_history
    from perfsuite.verdict.gates import CheckResult

    benchmarks = json.loads(path.read_text())["benchmarks"]
    checks = [(b["name"], CheckResult.from_dict(b["extra_info"]["perfsuite_verdicts"]))
              for b in benchmarks if "perfsuite_verdicts" in b["extra_info"]]
    gates = [{"name": name, "metric": v.metric, "threshold": v.threshold, "kind": v.kind, "role": v.role,
              "measured": v.measured, "decision": v.decision,
              "interval": None if v.interval is None else [v.interval.low, v.interval.high]}
             for name, check in checks for v in check.verdicts]
    compared = [(b["name"], HistoryComparison.from_dict(b["extra_info"]["vs_history"]))
                for b in benchmarks if "vs_history" in b["extra_info"]]
    decisions = decide_history([c for _, c in compared], alpha=compared[0][1].alpha) if compared else ()
    history = [{"name": name, "change": c.change, "runs": c.runs, "verdict": d.verdict, "slower": d.significant_slowdown}
               for (name, c), d in zip(compared, decisions, strict=True)]
    return {"gates": gates, "history": history}


def _table(runs: list[dict]) -> str:
    lines = []
    for run in runs:
        lines.append(f"amount {run['amount']}: exit {run['exit']}, {run['wall_s']} s")
        for g in run["gates"]:
            low_high = "" if g["interval"] is None else f" [{g['interval'][0]:.3g}, {g['interval'][1]:.3g}]"
            lines.append(f"  gate {g['metric']} {g['kind']} {g['threshold']}: {g['measured']:.3g}{low_high} "
                         f"{g['decision']}{' (context)' if g['role'] == 'context' else ''}")
        for h in run["history"]:
            change = "n/a" if h["change"] is None else f"{h['change']:+.1%}"
            lines.append(f"  history {h['name']}: {change} vs {h['runs']} runs, {h['verdict']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=sorted(SELECTIONS), required=True,
                        help="which TF-native loader gets the planted work")
    parser.add_argument("--plant", choices=sorted(PLANTS), required=True, help="what extra work (see PLANTS)")
    parser.add_argument("--amounts", type=_amounts, required=True, help="planted amounts (comma-separated)")
    parser.add_argument("--history", type=int, default=3, help="unplanted runs saved first (default 3)")
    parser.add_argument("--data-dir", type=Path, default=None, help="--perfsuite-data-dir for every run")
    parser.add_argument("--out", type=Path, required=True,
                        help="JSON file for every run's verdicts (each run's own files go to OUT-runs/)")
    args = parser.parse_args()
    if args.history < 3:
        parser.error(f"--history: the stored-run comparison needs at least 3 earlier runs, found {args.history}")
    repo = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                               check=True).stdout.strip())
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.strip()
    kept = args.out.with_name(args.out.stem + "-runs")  # each run's pytest-benchmark JSON and output
    kept.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perfsuite-reach-") as scratch:
        clone = Path(scratch) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True)
        subprocess.run(["git", "checkout", "--quiet", commit], cwd=clone, check=True)
        selection, runs = SELECTIONS[args.source], []
        for index in range(args.history):
            run = _run(clone, selection, kept / f"history{index}.json", save=True, data_dir=args.data_dir)
            runs.append({"amount": 0.0, "role": "history", **run})
            print(_table(runs[-1:]), flush=True)
        for amount in [*args.amounts, 0.0]:
            if amount:
                _plant(clone, args.source, args.plant, amount)
            run = _run(clone, selection, kept / f"amount{amount}.json", save=False, data_dir=args.data_dir)
            subprocess.run(["git", "checkout", "--quiet", "--", str(LOADERS)], cwd=clone, check=True)
            runs.append({"amount": amount, "role": "planted" if amount else "control", **run})
            print(_table(runs[-1:]), flush=True)
    record = {"schema": 1, "commit": commit, "source": args.source, "plant": args.plant, "selection": selection,
              "runs": runs}
    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
