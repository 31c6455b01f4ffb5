"""perfsuite ab's own proof, through real revisions: A/A and planted slowdowns of one loader.

A clone of this repository in a temporary directory gets the working tree's files as its base commit,
then one temporary commit per planted slowdown that adds work to the TF-native WAV loader's map
function (``_tf_native_wav`` in perfsuite/data/loaders.py: the mel of a random signal ``fraction`` as
long as the utterance, the work ``perfsuite.tools.selftest.planted_slowdown`` adds). ``perfsuite ab`` then runs, as a
user runs it, on base vs base (A/A: the same revision on both sides) and base vs each planted commit,
the arms in rotated order trial after trial so the machine's drift reaches them alike. Each run's
verdicts give:

* false alarms: an A/A run with any benchmark "slower" or "faster", and a planted run with a benchmark
  other than the planted loader "slower" or "faster";
* detections: a planted run with the planted loader "slower" (it must also make the run exit 1);

each as a rate with its 95 % Clopper-Pearson interval, and the slowdown ab measured for each planted
arm (median over its runs). The test fails when a side fails, when the false-alarm rate is
demonstrably above TARGET_FALSE_ALARM_RATE or a detection rate demonstrably below TARGET_DETECTION_RATE
(the interval excludes the target), or when a control benchmark is flagged "slower" in a planted run.

On demand only (marker selftest; minutes per trial): ``pytest benchmarks/test_ab_selftest.py -m "selftest and slow"
-s -p no:randomly``; one run per arm a trial (its wall time per machine: docs/ab.md). Its size comes from
the environment: PERFSUITE_AB_SELFTEST_TRIALS (default 5), _PROFILE (quick: the smoke profile's rounds
of a few milliseconds measure the scheduler), _K (the benchmarks; default: the TF-native WAV loader and
the TF-native cache loader as a control), _BUDGET (seconds per run, default 100), _FRACTIONS (default
"0.10:0.06,0.25:0.16": target slowdown:map fraction, read off the line through what ab measured for
two probe fractions in the quick profile; docs/results/ has the probe),
_OUT (a JSON file for every run's verdicts).
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from perfsuite.measure.stats import clopper_pearson
from perfsuite.verdict import metrics as registry

pytestmark = [pytest.mark.selftest, pytest.mark.slow]  # minutes of runs: nightly (full profile) or on demand

ROOT = Path(__file__).resolve().parents[1]
LOADERS = Path("perfsuite/data/loaders.py")
PLANTED = "test_loader[tf_native-wav-bs16-w2]"
RETURN_LINE = '    return log_mel_tf(tf.cast(pcm, tf.float32) * (1.0 / 32768.0), mel_config), element["tokens"]\n'
PLANTED_LINES = ('    mel = log_mel_tf(tf.cast(pcm, tf.float32) * (1.0 / 32768.0), mel_config)  # planted by test_ab_selftest\n'
                 '    frames = tf.maximum(tf.cast(tf.cast(tf.shape(mel)[0], tf.float32) * {fraction}, tf.int32), 1)\n'
                 '    noise = tf.random.stateless_uniform([frames * mel_config.hop_length], seed=[1, 2], minval=-0.5, maxval=0.5)\n'
                 '    zero = tf.cast(tf.strings.length(element["path"]) < 0, tf.float32)\n'
                 '    return mel + zero * tf.reduce_mean(log_mel_tf(noise, mel_config)), element["tokens"]\n')


def _setting(name: str, default: str) -> str:
    return os.environ.get(f"PERFSUITE_AB_SELFTEST_{name}", default)


TRIALS = int(_setting("TRIALS", "5"))
PROFILE = _setting("PROFILE", "quick")
SELECTION = _setting("K", "test_loader and bs16-w2 and (tf_native-wav or tf_native-cache)")
BUDGET_S = _setting("BUDGET", "100")
FRACTIONS = {float(t): float(f) for t, f in (pair.split(":") for pair in _setting("FRACTIONS", "0.10:0.06,0.25:0.16")
                                              .split(","))}


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(repo), "-c", "user.name=selftest", "-c", "user.email=selftest@invalid",
                             *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"git {' '.join(args)} in {repo}: {result.stderr.strip()}")
    return result.stdout.strip()


def _clone_of_working_tree(destination: Path) -> str:
    """A clone whose base commit holds the working tree's files (tracked and untracked, ignored left out)."""
    _git(ROOT, "clone", "--quiet", "--no-checkout", str(ROOT), str(destination))  # an empty index
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    _git(destination, "add", "-A")
    _git(destination, "commit", "--quiet", "--allow-empty", "-m", "base: the working tree")
    return _git(destination, "rev-parse", "HEAD")


def _plant(repo: Path, base: str, *, fraction: float, target: float) -> str:
    """A commit on top of base whose TF-native WAV loader does ``fraction`` of a mel more per utterance."""
    _git(repo, "checkout", "--quiet", "--detach", base)
    source = (repo / LOADERS).read_text()
    if source.count(RETURN_LINE) != 1:
        pytest.fail(f"{LOADERS}: expected _tf_native_wav's return line once to plant the slowdown "
                    f"({RETURN_LINE.strip()!r}), found it {source.count(RETURN_LINE)} times")
    (repo / LOADERS).write_text(source.replace(RETURN_LINE, PLANTED_LINES.format(fraction=fraction)))
    _git(repo, "commit", "--quiet", "-am", f"planted: ~{target:.0%} more work in the TF-native WAV loader")
    commit = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "--quiet", "--detach", base)
    return commit


def _run_ab(repo: Path, base: str, head: str, out: Path) -> dict:
    command = [sys.executable, "-m", "perfsuite.tools.cli", "ab", base, head, "-k", SELECTION, "--profile", PROFILE,
               "--budget", BUDGET_S, "--json", str(out)]
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1) or not out.exists():
        pytest.fail(f"perfsuite ab {base[:10]} {head[:10]}: exit status {result.returncode}\n{result.stdout}\n"
                    f"{result.stderr[-3000:]}")
    data = json.loads(out.read_text())
    data["returncode"] = result.returncode
    return data


def _rate(flagged: int, trials: int) -> dict:
    low, high = clopper_pearson(successes=flagged, trials=trials)
    return {"flagged": flagged, "trials": trials, "rate": flagged / trials, "ci_low": low, "ci_high": high}


def _describe(name: str, rate: dict) -> str:
    return (f"{name}: {rate['flagged']}/{rate['trials']} ({rate['rate']:.0%}, 95% CI "
            f"{rate['ci_low']:.1%}-{rate['ci_high']:.1%})")


def _rate_metric(name: str) -> str | None:
    """The ratios.yaml metric that judges a rate of the summary (selftest_false_alarm_rate,
    selftest_detection_10pct_rate, ...), or None where none is declared (a target set through _FRACTIONS)."""
    metric = ("selftest_false_alarm_rate" if name == "false_alarm"
              else f"selftest_detection_{name.removeprefix('detection +').removesuffix('%')}pct_rate")
    return metric if registry.is_declared(metric) else None


def test_ab_false_alarm_and_detection_rates(perfsuite, tmp_path_factory, capsys):
    repo = tmp_path_factory.mktemp("ab-selftest") / "repo"
    base = _clone_of_working_tree(repo)
    arms = {"A/A": base} | {f"+{t:.0%}": _plant(repo, base, fraction=f, target=t) for t, f in FRACTIONS.items()}
    runs: dict[str, list[dict]] = {name: [] for name in arms}
    started = time.monotonic()
    for trial in range(TRIALS):
        names = list(arms)
        for name in names[trial % len(names):] + names[:trial % len(names)]:  # rotated order
            slug = "aa" if name == "A/A" else f"slow{name[1:-1]}"
            runs[name].append(_run_ab(repo, base, arms[name], repo.parent / f"ab-{trial}-{slug}.json"))

    def verdicts(run):
        return {b["name"].split("::")[-1]: b for b in run["benchmarks"]}

    false_alarms = sum(any(b["verdict"] in ("slower", "faster") for b in run["benchmarks"]) for run in runs["A/A"])
    control_alarms = sum(any(b["verdict"] in ("slower", "faster") for n, b in verdicts(run).items() if n != PLANTED)
                         for name in arms if name != "A/A" for run in runs[name])
    control_slower = sum(b["verdict"] == "slower" for name in arms if name != "A/A" for run in runs[name]
                         for n, b in verdicts(run).items() if n != PLANTED)
    summary = {"false_alarm": _rate(false_alarms, TRIALS),
               "control_false_alarm": _rate(control_alarms, TRIALS * (len(arms) - 1))}
    for name in arms:
        if name == "A/A":
            continue
        planted = [verdicts(run).get(PLANTED) for run in runs[name]]
        if None in planted:
            pytest.fail(f"{name}: {PLANTED} was not compared in every run (selection {SELECTION!r})")
        detected = sum(b["verdict"] == "slower" and run["returncode"] == 1 for b, run in zip(planted, runs[name]))
        summary[f"detection {name}"] = {**_rate(detected, TRIALS),
                                        "median_change": float(np.median([b["change"] for b in planted])),
                                        "median_rounds": float(np.median([b["rounds"] for b in planted]))}
    aa_changes = [b["change"] for run in runs["A/A"] for b in run["benchmarks"]]
    load = [run["load"]["before"] for runs_of in runs.values() for run in runs_of]
    record = {"profile": PROFILE, "selection": SELECTION, "budget_s": float(BUDGET_S), "fractions": FRACTIONS,
              "trials": TRIALS, "elapsed_s": time.monotonic() - started, "load_before_runs": load,
              "aa_median_abs_change": float(np.median(np.abs(aa_changes))), "rates": summary, "runs": runs}
    out = Path(_setting("OUT", str(repo.parent / "ab-selftest.json")))
    out.write_text(json.dumps(record, indent=1, default=str))
    with capsys.disabled():
        print(f"\nab selftest: {TRIALS} trial(s) x {len(arms)} arms, profile {PROFILE}, -k {SELECTION!r}, budget "
              f"{BUDGET_S} s a run, {record['elapsed_s']:.0f} s; load average {min(load)}-{max(load)} on "
              f"{os.cpu_count()} CPU(s); A/A median |change| {record['aa_median_abs_change']:.1%}")
        for name, rate in summary.items():
            extra = (f"; ab measured {rate['median_change']:+.1%} in a median {rate['median_rounds']:.0f} rounds"
                     if "median_change" in rate else "")
            print(f"ab selftest {_describe(name, rate)}{extra}")
        print(f"ab selftest: every run's verdicts in {out}")

    # The rates are judged by ratios.yaml's selftest_*_rate gates, as the plugin judges every figure.
    for name, rate in summary.items():
        metric = _rate_metric(name)
        if metric is not None:
            perfsuite.add(metric, rate["rate"])
    assert control_slower == 0, f"{control_slower} control benchmark(s) flagged slower in planted runs: see {out}"
