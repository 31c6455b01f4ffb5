"""The GitHub Actions workflows parse and hold the keys the nightly GPU job and the CPU job depend on."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

WORKFLOWS = Path(__file__).resolve().parent.parent / ".github" / "workflows"


def load(name: str) -> dict:
    path = WORKFLOWS / name
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(workflow, dict), f"{path}: expected a mapping at the top level, found {type(workflow)}"
    return workflow


def triggers(workflow: dict) -> dict:
    # YAML 1.1 (PyYAML) reads the bare key `on` as the boolean True.
    on = workflow.get("on", workflow.get(True))
    assert on is not None, "expected an `on:` key with the triggers"
    return dict.fromkeys(on) if isinstance(on, list) else on


def only_job(workflow: dict) -> dict:
    jobs = workflow["jobs"]
    assert len(jobs) == 1, f"expected one job, found {sorted(jobs)}"
    return next(iter(jobs.values()))


def run_lines(job: dict) -> list[str]:
    """Each `run:` script with folded or continued lines joined, split into commands."""
    commands = []
    for step in job["steps"]:
        script = step.get("run", "").replace("\\\n", " ")
        commands += [" ".join(line.split()) for line in script.splitlines() if line.strip()]
    return commands


def uses(job: dict, action: str) -> list[dict]:
    return [step for step in job["steps"] if step.get("uses", "").split("@")[0] == action]


@pytest.fixture(scope="module")
def nightly() -> dict:
    return load("nightly-gpu.yml")


@pytest.fixture(scope="module")
def ci() -> dict:
    return load("ci.yml")


def test_nightly_runs_on_a_schedule_and_on_demand(nightly):
    on = triggers(nightly)
    assert set(on) == {"schedule", "workflow_dispatch"}
    crons = [entry["cron"] for entry in on["schedule"]]
    assert len(crons) == 1 and len(crons[0].split()) == 5
    minute, hour, day, month, weekday = crons[0].split()
    assert (day, month, weekday) == ("*", "*", "*"), f"expected a nightly cron, found {crons[0]!r}"
    assert minute.isdigit() and hour.isdigit()


def test_nightly_runs_on_a_self_hosted_gpu_runner(nightly):
    labels = only_job(nightly)["runs-on"]
    assert isinstance(labels, list)
    assert {"self-hosted", "linux", "x64", "gpu"} <= set(labels)
    assert "--labels gpu" in (WORKFLOWS / "nightly-gpu.yml").read_text(encoding="utf-8").split("jobs:")[0]


def test_nightly_installs_the_gpu_extra_and_checks_the_gpu(nightly):
    commands = run_lines(only_job(nightly))
    assert 'pip install -c constraints.txt -e ".[test,gpu]"' in commands
    assert "python -m perfsuite.measure.gpu" in commands
    assert commands.index('pip install -c constraints.txt -e ".[test,gpu]"') < commands.index("python -m perfsuite.measure.gpu")


def test_nightly_benchmarks_compare_and_autosave(nightly):
    job = only_job(nightly)
    benchmark = [c for c in run_lines(job) if c.startswith("pytest benchmarks/")]
    assert len(benchmark) == 1
    args = benchmark[0].split()
    for option in ("--perfsuite-profile=full", "--benchmark-compare", "--benchmark-autosave",
                   "--benchmark-json=bench.json"):
        assert option in args, f"nightly pytest command: expected {option}, found {benchmark[0]!r}"


def test_nightly_keeps_benchmark_storage_between_nights(nightly):
    job = only_job(nightly)
    steps = job["steps"]
    restore = uses(job, "actions/cache/restore")
    save = uses(job, "actions/cache/save")
    assert len(restore) == len(save) == 1
    assert restore[0]["with"]["path"] == save[0]["with"]["path"] == ".benchmarks"
    # A fresh key per night (cache entries are immutable), restored by prefix from the newest one.
    key = save[0]["with"]["key"]
    assert "github.run_id" in key and restore[0]["with"]["key"] == key
    prefix = restore[0]["with"]["restore-keys"].strip()
    assert key.startswith(prefix) and prefix != key
    # Restore before the run, save after it even when it fails.
    pytest_step = next(i for i, s in enumerate(steps) if s.get("run", "").startswith("pytest benchmarks/"))
    assert steps.index(restore[0]) < pytest_step < steps.index(save[0])
    assert save[0]["if"] == "always()"


def test_nightly_uploads_json_and_history_as_artifacts(nightly):
    job = only_job(nightly)
    upload = uses(job, "actions/upload-artifact")
    assert len(upload) == 1
    options = upload[0]["with"]
    paths = options["path"].split()
    assert {"bench.json", ".benchmarks/", "reports/"} <= set(paths)
    assert options["include-hidden-files"] is True  # else the dot-directory .benchmarks is left out
    assert upload[0]["if"] == "always()"
    assert job["steps"][-1] is upload[0]


def test_ci_runs_tests_in_parallel_and_the_quick_profile_serially(ci):
    on = triggers(ci)
    assert {"push", "pull_request"} <= set(on)
    job = only_job(ci)
    assert job["runs-on"] == "ubuntu-latest"
    setup = uses(job, "actions/setup-python")
    assert len(setup) == 1 and str(setup[0]["with"]["python-version"]) == "3.11"
    commands = run_lines(job)
    assert 'pip install -c constraints.txt -e ".[test]"' in commands
    assert "pytest -n auto" in commands
    quick = [c for c in commands if c.startswith("pytest benchmarks/")]
    assert len(quick) == 1
    args = quick[0].split()
    assert "--perfsuite-profile=quick" in args
    assert args[args.index("-p"):args.index("-p") + 2] == ["-p", "no:randomly"]
    assert "-n" not in args  # pytest-benchmark disables itself under xdist


def test_workflows_use_pinned_major_versions_of_actions(nightly, ci):
    for workflow in (nightly, ci):
        for step in only_job(workflow)["steps"]:
            if "uses" in step:
                action, _, version = step["uses"].partition("@")
                assert version.startswith("v"), f"{action}: expected a pinned @vN version, found {version!r}"


def test_every_install_of_the_project_passes_the_constraints_file():
    """The work snapshots hold for the pinned TensorFlow and numpy: every workflow installs as the README does."""
    installs = [line for path in sorted(WORKFLOWS.glob("*.yml")) for job in load(path.name)["jobs"].values()
                for line in run_lines(job) if "pip install" in line and " -e " in f"{line} "]
    assert installs, "expected the workflows to install the project"
    for line in installs:
        assert "-c constraints.txt" in line, f"expected '-c constraints.txt' in the install, found {line!r}"
