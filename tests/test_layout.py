"""The package's layers: imports flow one way (import-linter contracts in pyproject.toml)."""

from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).parents[1]


def test_imports_flow_one_way(monkeypatch):
    monkeypatch.chdir(ROOT)  # lint-imports reads the contracts from ./pyproject.toml
    assert lint_imports(config_filename="pyproject.toml", no_cache=True) == 0


def test_pytest_benchmark_internals_are_reached_from_one_module():
    users = [p.relative_to(ROOT) for p in (ROOT / "perfsuite").rglob("*.py") if "_benchmarksession" in p.read_text()]
    assert users == [Path("perfsuite/pytest_plugin/benchmark_adapter.py")]


def test_the_installed_pytest_benchmark_provides_what_perfsuite_relies_on():
    from perfsuite.pytest_plugin.benchmark_adapter import compatibility_problems

    assert compatibility_problems() == []
