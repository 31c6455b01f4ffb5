"""The terminal summary on hand-made outcomes, and perfsuite.tables: groups from test names, headline
figures with their intervals, gate rows, 120 columns, the Markdown twin."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.measure.stats import median_interval
from perfsuite.pytest_plugin.recorder import Outcome
from perfsuite.pytest_plugin.summary import group_of, headline_figures, markdown, sections, short_id, terminal
from perfsuite.tables import Table
from perfsuite.verdict.gates import PASS, CheckResult, Threshold, Verdict

LOADER = "quick::test_loaders.py::test_loader[numpy_function-cache-bs16-w2]"
RATIO = "quick::test_loaders.py::test_loader_ratio[tf_native_over_numpy_function_cache]"
STEP = "quick::test_step.py::test_step[xla-bs32-cpu-fp32]"


def _outcome(benchmark_id, metrics, rounds, verdicts=()):
    return Outcome(benchmark_id, CheckResult(benchmark_id, tuple(verdicts), ()), None, "enforce",
                   figures=headline_figures(metrics, rounds))


def _ratio_verdict():
    ratios = [5.1, 5.6, 5.9, 6.2, 6.4]
    return Verdict.of(RATIO, Threshold("tf_native_over_numpy_function_cache_ratio", "min", 2.0), 5.9, "ratios.yaml",
                   PASS, median_interval(ratios))


OUTCOMES = [
    _outcome(LOADER, {"samples_per_s": 12693.4, "audio_s_per_s": 11137.0, "batch_p95_s": 0.001581,
                      "first_s": 0.0031, "variation_ratio": 0.1},
             {"samples_per_s": [12551.0, 12700.0, 12839.0], "audio_s_per_s": [11011.0, 11100.0, 11263.0]}),
    _outcome(RATIO, {"tf_native_over_numpy_function_cache_ratio": 5.9},
             {"tf_native_over_numpy_function_cache_ratio": [5.1, 5.6, 5.9, 6.2, 6.4]}, [_ratio_verdict()]),
    _outcome(STEP, {"samples_per_s": 21.3, "first_s": 3.3, "batch_p95_s": 0.8}, {"samples_per_s": [21.0, 21.5]}),
]


def test_groups_come_from_the_file_and_ceiling_tests():
    assert group_of("benchmarks/test_loaders.py::test_loader[tf_native-wav-bs16-w2]") == "loaders"
    assert group_of("benchmarks/test_loaders.py::test_raw_read_ceiling[bs16-w2]") == "ceilings"
    assert group_of("test_step.py::test_step[xla]") == "step"
    assert group_of("benchmarks/test_emulated.py::TestX::test_emulated_step[a]") == "emulated"
    assert short_id(LOADER) == "test_loader[numpy_function-cache-bs16-w2]"


def test_each_group_shows_its_headline_figures_with_intervals_then_its_gates():
    lines = terminal(sections(OUTCOMES))
    text = "\n".join(lines)
    assert lines[0] == "loaders: how fast"
    loader = next(line for line in lines if line.startswith("test_loader[numpy_function-cache-bs16-w2]"))
    assert "12,693 [12,551–12,839]" in loader and "11,137 [11,011–11,263]" in loader
    assert "1.581" in loader  # p95 in ms
    assert "variation" not in text  # not a headline figure
    ratios = lines[lines.index("loaders: same-run ratios and shares") + 1:]
    assert ratios[0].split() == ["benchmark", "ratio", "[interval]", "rounds"]
    assert ratios[2].split() == [short_id(RATIO), "5.9", "[5.1–6.4]", "5"]
    gates = lines[lines.index("loaders: gates") + 1:]
    assert gates[0].split()[:3] == ["benchmark", "(metric)", "measured"]
    assert any(line.startswith(short_id(RATIO)) and line.endswith("ok") and "≥ 2" in line for line in gates)
    assert "step: how fast" in lines and "step: gates" not in lines  # no thresholds: no gate table
    assert all(len(line) <= 120 for line in lines), max(lines, key=len)


def test_the_markdown_twin_holds_the_same_tables():
    text = markdown(sections(OUTCOMES), ["a note"], title="perfsuite (quick)")
    assert text.startswith("### perfsuite (quick)\n")
    assert "#### loaders: how fast" in text and "#### step: how fast" in text
    assert "| test_step[xla-bs32-cpu-fp32]" in text and text.endswith("- a note\n")


def test_a_metric_without_rounds_has_no_interval():
    (figure,) = headline_figures({"first_s": 3.3, "samples_per_s": None}, {})
    assert (figure.metric, figure.low, figure.high, figure.shown()) == ("first_s", None, None, "3.3")


CELL_TEXT = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=12)


@given(st.lists(st.tuples(CELL_TEXT, st.floats(-1e6, 1e6)), min_size=1, max_size=6))
def test_a_table_renders_every_cell_in_both_forms(rows):
    table = Table.of(("name", "value"), [(name, f"{value:g}") for name, value in rows], ("left", "right"))
    terminal_lines = table.terminal()
    assert len(terminal_lines) == len(rows) + 2
    markdown_lines = table.markdown().splitlines()
    assert len(markdown_lines) == len(rows) + 2
    for (name, value), line in zip(rows, markdown_lines[2:]):
        assert f"{value:g}" in line and name.replace("|", "\\|").strip() in line


def test_a_table_refuses_a_row_of_the_wrong_width():
    with pytest.raises(ValueError, match=r"Table row 1: expected 2 cells \(a, b\), found 1"):
        Table.of(("a", "b"), [("x", "y"), ("z",)])
