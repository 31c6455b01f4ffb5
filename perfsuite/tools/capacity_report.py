"""The capacity section of a diagnosis' report (tools/report.py): the capacity model's ceiling against cores as a
plot, and its figures as Markdown. The capacity figures and their findings are in verdict/capacity.py."""

from __future__ import annotations

from pathlib import Path

from perfsuite.plotting import pyplot, save
from perfsuite.tables import Table
from perfsuite.verdict.capacity import (
    CHECK_CORES,
    PLOT_MIN_CORES,
    CapacityFigures,
    ceiling,
    check_words,
    without_call_limits,
)
from perfsuite.verdict.diagnosis_figures import interval_cell

_yes_no = {True: "yes", False: "no"}


def plot_capacity(figures: CapacityFigures, path: Path) -> Path:
    """The capacity model's ceiling (samples/s) against cores: as written (its interval from the stages' cost
    intervals as a band) and with the split's parallel calls; the step's need as a horizontal line; the two-core
    check's measured figure with its interval; --cores marked."""
    plt = pyplot()
    top = max(PLOT_MIN_CORES, 2 * figures.cores, figures.target_cores or 0, (figures.cores_needed or 0) + 2)
    cores = list(range(1, top + 1))
    figure, ax = plt.subplots(figsize=(7, 3.6))
    ax.fill_between(cores, _finite([figures.ceiling(k, "low") for k in cores]),
                    _finite([figures.ceiling(k, "high") for k in cores]), color="tab:blue", alpha=0.2,
                    label="as written: interval from the stage costs'")
    ax.plot(cores, _finite([figures.ceiling(k) for k in cores]), "o-", color="tab:blue", markersize=3,
            label="as written (model)")
    free = without_call_limits(figures.models())
    ax.plot(cores, _finite([ceiling(free, k) for k in cores]), "--", color="tab:green",
            label="with the split's calls")
    parallel = figures.parallel_maps()
    if parallel != figures.models():
        ax.plot(cores, _finite([ceiling(parallel, k) for k in cores]), ":", color="tab:purple",
                label="with its plain maps parallel")
    measured = figures.measured_2core
    if measured is not None:
        ax.errorbar([CHECK_CORES], [measured.median], yerr=[[measured.median - measured.low],
                                                           [measured.high - measured.median]],
                    fmt="s", color="tab:orange", capsize=4, label=f"measured on {CHECK_CORES} cores")
    if figures.need_samples_per_s is not None:
        ax.axhline(figures.need_samples_per_s, color="tab:red", linewidth=1,
                   label=f"the step's need ({figures.step_s * 1e3:.3g} ms at batch {figures.batch})")
    if figures.target_cores is not None:
        ax.axvline(figures.target_cores, color="grey", linestyle=":", label=f"--cores {figures.target_cores}")
    ax.set_xlabel("cores")
    ax.set_ylabel("samples/s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    needed = (f"about {figures.cores_needed} cores feed the step" if figures.cores_needed else
              "no step to feed" if figures.need_samples_per_s is None else "no number of cores feeds the step")
    ax.set_title(f"the pipeline's ceiling against cores (capacity model): {needed}", fontsize=9)
    return save(plt, figure, path)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def _finite(values: list[float]) -> list[float]:
    """Infinite ceilings (nothing costs) left out of a plot as gaps."""
    return [value if value != float("inf") else float("nan") for value in values]


def capacity_lines(figures: CapacityFigures | None) -> list[str]:
    """The capacity section: each stage's cost, calls and split, what AUTOTUNE used, and the check."""
    if figures is None:
        return []
    rows = [(s.stage, interval_cell(s.cost, _ms), interval_cell(s.cpu, _ms),
             f"{s.elements_per_sample:.3g}",
             "sequential" if s.calls == 1 else "AUTOTUNE" if s.calls is None else str(s.calls),
             "-" if s.thread is None else str(s.thread), _yes_no[s.cached], s.split_calls or "-",
             s.autotune.words() if s.autotune is not None else "-") for s in figures.stages]
    table = Table.of(("stage", "thread ms per element", "core ms per element", "elements per sample", "calls",
                      "thread", "cached", f"split ({figures.cores} cores)", "AUTOTUNE used"), rows).markdown()
    two = "{:.2f}".format
    return ["", "## Capacity", "", f"Costs measured by {figures.method}.", "", table, "",
            f"- check: {check_words(figures)} ({figures.check_how})",
            (f"- process CPU s per wall s: confined {interval_cell(figures.cpu_per_wall, two)}, on 2 cores "
            f"{interval_cell(figures.cpu_per_wall_2core, two)}; CPU per sample on 2 cores over confined "
            f"{interval_cell(figures.cpu_per_sample_ratio, two)}"),
            f"- AUTOTUNE: {figures.autotune_source}"]


