"""The capacity model checked on the seven held-out pipelines (tests/pipelines): diagnose --pipeline at its
default budget, one pipeline at a time, then per pipeline the 2-core throughput predicted from 1-core
measurements against the one measured as written, the cores needed and AUTOTUNE's choices.

    python scripts/check_capacity.py OUT_DIR [--budget 180]

Run it with nothing else on the machine: the figures are timings.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

PIPELINES = Path(__file__).resolve().parents[1] / "tests" / "pipelines"
RECIPES = ("per_bin_norm", "bins_first", "bucketed", "cache_after_repeat", "zipped", "tfrecord")


def commands(budget: str):
    recipes = PIPELINES / "recipes.py"
    for name in RECIPES:
        yield name, ["--pipeline", f"{recipes}:{name}", "--step", f"{recipes}:make_step", "--frame-hop-s", "0.01",
                     "--budget", budget]
    tts = PIPELINES / "tts_recipe.py"
    yield "tts_recipe", ["--pipeline", f"{tts}:make_dataset", "--step", f"{tts}:make_step", "--budget", budget]


def row(name: str, result: dict) -> str:
    """One line of the table: the medians, and the check's own error (predicted / measured per round)."""
    capacity = result.get("capacity") or {}
    predicted, measured, check = capacity.get("predicted_2core"), capacity.get("measured_2core"), capacity.get("check")
    if not predicted or not measured or not check:
        return f"| {name} | - | - | - | {capacity.get('cores_needed')} | not checked |"
    within = "yes" if abs(check["median"] - 1) <= 0.20 else "no"
    error = f"{check['median'] - 1:+.0%} [{check['low'] - 1:+.0%}, {check['high'] - 1:+.0%}], {check['rounds']} rounds"
    autotune = "; ".join(f"{node.get('name')} {node.get('parameters')}" for node in capacity.get("autotune") or []
                         if node.get("parameters"))
    return (f"| {name} | {predicted['median']:.0f} | {measured['median']:.0f} | {error} ({within}) | "
            f"{capacity.get('cores_needed')} | {autotune or '-'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--budget", default="180")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = ["| pipeline | predicted 2-core | measured 2-core | error [interval] (within ±20 %) | cores needed | AUTOTUNE |",
             "|---|---|---|---|---|---|"]
    for name, options in commands(args.budget):
        out = args.out / f"{name}.json"
        with open(args.out / f"{name}.txt", "w") as log:
            subprocess.run([sys.executable, "-m", "perfsuite", "diagnose", *options, "--json", str(out)],
                           stdout=log, stderr=subprocess.STDOUT, check=False)
        lines.append(row(name, json.loads(out.read_text())) if out.exists() else f"| {name} | no JSON written |")
        print(lines[-1], flush=True)
    (args.out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
