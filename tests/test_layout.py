"""The package's layers: imports flow one way (import-linter contracts in pyproject.toml)."""

import ast
import re
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


PRIVATE_GRAPH_ACCESS = {"_input_dataset", "_inputs", "_variant_tensor", "as_graph_def", "_as_serialized_graph"}
DATASET_OP_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*Dataset(V\d+)?$")


def _modules_outside(package: str):
    """Every perfsuite module outside perfsuite/<package>/, with its parsed AST."""
    for path in sorted((ROOT / "perfsuite").rglob("*.py")):
        if package not in path.relative_to(ROOT / "perfsuite").parts[:1]:
            yield path.relative_to(ROOT), ast.parse(path.read_text(encoding="utf-8"))


def test_only_the_pipeline_model_reads_a_dataset_s_private_inputs_or_a_graphdef():
    # The pipeline model (perfsuite/workload/) answers every question asked of a pipeline's graph; a reader
    # elsewhere that walks a dataset's inputs or a GraphDef itself is a second reading that can drift.
    found = [f"{path}:{node.lineno}: .{node.attr}" for path, tree in _modules_outside("workload")
             for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in PRIVATE_GRAPH_ACCESS]
    assert found == []


def test_no_dataset_op_name_is_written_outside_the_op_table():
    found = [f"{path}:{node.lineno}: {node.value!r}" for path, tree in _modules_outside("workload")
             for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and DATASET_OP_NAME.match(node.value)]
    inside = [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
              for path in sorted((ROOT / "perfsuite" / "workload").glob("*.py")) if path.name != "op_table.py"
              for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
              if isinstance(node, ast.Constant) and isinstance(node.value, str) and DATASET_OP_NAME.match(node.value)]
    assert found + inside == []
