"""Plots and a Markdown summary of a diagnosis (the dict perfsuite.diagnose.diagnose returns), and of
a benchmark run (the records the pytest plugin collects with ``--perfsuite-report``).

matplotlib (the `report` extra) is imported here only, with the Agg backend: no display is needed.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

EXTRA_HINT = "pip install 'perfsuite[report]' (the 'test' extra includes it too)"


class ReportUnavailable(RuntimeError):
    """matplotlib is not installed; the message names the extra that provides it."""


def require_matplotlib(option: str) -> None:
    """Raise ReportUnavailable naming `option` and the extra when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise ReportUnavailable(f"{option} needs matplotlib, which cannot be imported ({error}): "
                                f"{EXTRA_HINT}") from None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_report(result: dict, directory: Path) -> Path:
    """Write the PNG plots and summary.md into directory; return the summary's path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    plots = [plot_batch_timeline(result, directory / "batch_timeline.png"),
             plot_sweep(result, directory / "throughput_vs_workers.png", axis="workers"),
             plot_sweep(result, directory / "throughput_vs_batch_size.png", axis="batch_size")]
    gpu = result.get("gpu", {})
    if gpu.get("available") and gpu.get("timeline"):
        plots.append(plot_gpu_timeline(gpu["timeline"], directory / "gpu_utilisation.png"))
    summary = directory / "summary.md"
    summary.write_text(markdown_summary(result, [p.name for p in plots]), encoding="utf-8")
    return summary


def plot_batch_timeline(result: dict, path: Path) -> Path:
    """Per-batch time of every pipeline's steady batches; a detected cycle's period marked by dotted lines."""
    plt = _pyplot()
    pipelines = result["pipelines"]
    figure, axes = plt.subplots(len(pipelines), 1, figsize=(9, 2.2 * len(pipelines)), squeeze=False)
    batches = result.get("settings", {}).get("batches")
    for ax, (name, pipeline) in zip(axes[:, 0], pipelines.items()):
        rounds = len(pipeline["loader"]["batch_s"]) // batches if batches else 0
        _timeline(ax, name, pipeline["loader"], round_lengths=[batches] * rounds)
    axes[-1, 0].set_xlabel("steady batch (rounds joined; grey lines: round boundaries)")
    return _save(plt, figure, path)


def _timeline(ax, name: str, figures: dict, *, unit: str = "batch", round_lengths=None) -> None:
    """One per-batch (or per-call) time series, with a detected cycle's period marked by red dotted lines
    and, when round_lengths (batches per round, in order) are given, the boundaries between measurement
    rounds by grey ones."""
    times_ms = [s * 1e3 for s in figures["batch_s"]]
    for x in itertools.accumulate((round_lengths or [])[:-1]):
        ax.axvline(x - 0.5, color="grey", linestyle="--", linewidth=0.6, alpha=0.6)
    ax.plot(range(len(times_ms)), times_ms, marker=".", linewidth=0.8)
    title = f"{name}: {figures['samples_per_s']:.0f} samples/s"
    if figures.get("cycle_significant"):
        period = figures["cycle_period"]
        for x in range(0, len(times_ms), period):
            ax.axvline(x, color="red", linestyle=":", linewidth=0.8)
        title += f", cycle every {period} {'batches' if unit == 'batch' else unit + 's'}"
    else:
        title += ", no significant cycle"
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(f"ms / {unit}")


def _save(plt, figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(figure)
    return path


def _point_name(axis: str, point: int) -> str:
    return "AUTOTUNE" if axis == "workers" and point == -1 else str(point)


def plot_sweep(result: dict, path: Path, *, axis: str) -> Path:
    """tf_native WAV samples/s against workers or batch size: left, each point's median over the rounds
    with its per-round values and range; right, each round's ratio to the current setting, with the
    no-change line and the minimum gain a recommendation needs."""
    plt = _pyplot()
    figures = result["sweep"][axis]
    rows = figures["points"]
    names = [_point_name(axis, row[axis]) for row in rows]
    xs = list(range(len(rows)))
    label = axis.replace("_", " ")
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    medians = [row["samples_per_s"] for row in rows]
    errors = [[m - row["samples_per_s_low"] for m, row in zip(medians, rows)],
              [row["samples_per_s_high"] - m for m, row in zip(medians, rows)]]
    left.errorbar(xs, medians, yerr=errors, fmt="o-", capsize=4, color="tab:blue", label="median, range")
    for x, row in zip(xs, rows):
        left.plot([x] * len(row["samples_per_s_rounds"]), row["samples_per_s_rounds"], ".", color="grey",
                  alpha=0.7)
        if row["current"]:
            left.plot([x], [row["samples_per_s"]], "s", markersize=11, markerfacecolor="none", color="tab:orange",
                      label="current setting")
    left.set_xticks(xs, names)
    left.set_xlabel(label)
    left.set_ylabel("samples/s")
    left.set_ylim(bottom=0)
    left.legend(fontsize=7, loc="lower right")
    left.set_title(f"tf_native WAV loader vs {label} ({figures['rounds']} interleaved rounds)", fontsize=9)
    for x, row in zip(xs, rows):
        gain = row["vs_current"]
        ratios = [1.0] * figures["rounds"] if gain is None else gain["ratios"]
        colour = "tab:orange" if gain is None else ("tab:green" if gain["significant"] else "tab:grey")
        right.plot([x] * len(ratios), ratios, "o", color=colour, alpha=0.8)
        if gain is not None:
            right.plot([x - 0.2, x + 0.2], [gain["ratio_median"]] * 2, color=colour, linewidth=2)
    right.axhline(1.0, color="black", linewidth=0.8)
    right.axhline(1 + figures["min_gain"], color="tab:green", linestyle="--", linewidth=0.8,
                  label=f"+{figures['min_gain']:.0%}: minimum gain")
    right.set_xticks(xs, names)
    right.set_xlabel(label)
    right.set_ylabel("samples/s ÷ current, per round")
    right.legend(fontsize=7)
    clear = [row for row in rows if row["vs_current"] and row["vs_current"]["significant"]]
    verdict = ("clear gain: " + ", ".join(_point_name(axis, row[axis]) for row in clear)) if clear else \
        "no clear winner over the current setting"
    right.set_title(f"same-round ratio to current ({verdict})", fontsize=9)
    return _save(plt, figure, path)


def plot_gpu_timeline(timeline: dict, path: Path) -> Path:
    """GPU utilisation of each sampled device over the input-bound measurement window."""
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(9, 3))
    for device in timeline["devices"]:
        start = timeline["start"]
        ax.plot([t - start for t in device["util_timestamps"]], device["util"], label=f"GPU {device['index']}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("utilisation %")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def _sweep_drift_note(result: dict) -> list[str]:
    """The current setting's tf_native WAV loader is measured three times, a minute or so apart: in the
    loader comparison and in both sweeps. When the figures differ, say so: it shows how far absolute
    figures drift on this machine, and why the verdicts use same-round ratios."""
    figures = {f"the {axis.replace('_', '-')} sweep": next(row["samples_per_s"] for row in
                                                          result["sweep"][axis]["points"] if row["current"])
               for axis in ("workers", "batch_size")}
    loader = result.get("pipelines", {}).get("tf_native-wav", {}).get("loader")
    if loader:
        figures = {"the loader comparison": loader["samples_per_s"], **figures}
    values = list(figures.values())
    if min(values) <= 0 or max(values) / min(values) < 1.2:
        return []
    measured = ", ".join(f"{value:.0f} samples/s in {where}" for where, value in figures.items())
    return ["", (f"The current setting's tf_native WAV loader was measured {len(values)} times in this run: "
                 f"{measured}. Absolute figures moved that much within one run on this machine (other load, "
                 "what ran just before); the verdicts use ratios measured within the same rounds.")]


def markdown_summary(result: dict, plot_names: list[str]) -> str:
    lines = [f"# perfsuite diagnose: {result['dataset']}", ""]
    data = result["data"]
    lines += [f"Checked {data['checked']} utterance(s); {data['skipped']} unreadable file(s) skipped; "
              f"measured on {data.get('usable')}.", ""]
    repeat = data.get("repeat") or {}
    if repeat.get("copies", 1) > 1:
        lines += [(f"The dataset is smaller than one measurement round ({repeat['round_samples']} samples): every "
                   f"utterance was listed {repeat['copies']} times ({repeat['utterances_measured']} per pass, "
                   "epochs repeated) so that batches are full."), ""]
    lines += ["## Findings", ""]
    for verdict in result["verdicts"]:
        figures = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in verdict["evidence"].items())
        lines.append(f"- **{verdict['topic']}**: {verdict['finding']} ({figures})")
        if verdict["recommendation"]:
            lines.append(f"  - recommendation: {verdict['recommendation']}")
    lines += ["", "## Pipelines", "", "| pipeline | samples/s | variation | cycle | input-bound share |",
              "|---|---|---|---|---|"]
    for name, pipeline in result["pipelines"].items():
        loader, bound = pipeline["loader"], pipeline["input_bound"]
        variation = "n/a" if loader["variation_ratio"] is None else f"{loader['variation_ratio']:.1%}"
        cycle = f"every {loader['cycle_period']}" if loader["cycle_significant"] else "none"
        lines.append(f"| {name} | {loader['samples_per_s']:.1f} | {variation} | {cycle} | "
                     f"{bound['share']:.1%} ({bound['classification']}) |")
    lines += ["", "## Training step", "", "| mode | first call s | steady s/step |", "|---|---|---|"]
    for mode, figures in result["step"]["modes"].items():
        lines.append(f"| {mode} | {figures['first_s']:.3f} | {figures['batch_mean_s']:.4f} |")
    lines += _sweep_drift_note(result)
    for axis in ("workers", "batch_size"):
        figures = result["sweep"][axis]
        label = axis.replace("_", " ")
        lines += ["", f"## tf_native WAV loader vs {label}", "",
                  (f"{figures['rounds']} interleaved round(s), current setting "
                   f"{_point_name(axis, figures['current'])}. A point is recommended only with a median gain "
                   f"≥ {figures['min_gain']:.0%}, ≥ {figures['min_win_share']:.0%} of rounds faster and a paired "
                   f"t-test p < {figures['alpha']}."), "",
                  (f"| {label} | samples/s (median) | per-round range | ratio to current (median, range) "
                   "| rounds faster | p | clear gain |"), "|---|---|---|---|---|---|---|"]
        for row in figures["points"]:
            gain = row["vs_current"]
            name = _point_name(axis, row[axis])
            spread = f"{row['samples_per_s_low']:.1f}–{row['samples_per_s_high']:.1f}"
            if gain is None:
                lines.append(f"| {name} (current) | {row['samples_per_s']:.1f} | {spread} | 1 | - | - | - |")
                continue
            p_value = "-" if gain["p_value"] is None else f"{gain['p_value']:.2g}"
            lines.append(f"| {name} | {row['samples_per_s']:.1f} | {spread} | {gain['ratio_median']:.2f} "
                         f"({gain['ratio_low']:.2f}–{gain['ratio_high']:.2f}) | {gain['wins']}/{gain['rounds']} | "
                         f"{p_value} | {'yes' if gain['significant'] else 'no'} |")
    gpu = result["gpu"]
    lines += ["", "## GPU", "", "sampled" if gpu.get("available") else f"not available: {gpu.get('reason')}", ""]
    lines += ["## Plots", ""] + [f"![{name}]({name})" for name in plot_names] + [""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------- benchmark runs


def _file_stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text).strip("-")[:120]


def write_benchmark_report(records: list[dict], directory: Path, *, title: str = "perfsuite benchmark run") -> Path:
    """The report of a benchmark run: per benchmark with a primary measurement, a PNG of its per-batch
    (per-call) times with any detected period marked; one PNG of every ratio metric (median and, where
    interleaved rounds were recorded, their range); summary.md linking them. Returns summary.md's path.

    records: what the plugin collects per benchmark: benchmark_id, outcome, metrics (the gated
    figures), measurement (Measurement.as_dict() of the primary measurement, or None), ratio_rounds
    ({metric: per-round ratios} for ratios measured by Recorder.compare).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    timelines = {}
    for index, record in enumerate(records):
        if record.get("measurement") and record["measurement"].get("batch_s"):
            path = directory / f"timeline-{index:02d}-{_file_stem(record['benchmark_id'].split('::', 1)[-1])}.png"
            timelines[record["benchmark_id"]] = plot_benchmark_timeline(record, path).name
    ratios = _ratio_rows(records)
    ratio_plot = plot_ratios(ratios, directory / "ratios.png").name if ratios else None
    summary = directory / "summary.md"
    summary.write_text(benchmark_summary(records, timelines, ratios, ratio_plot, title=title), encoding="utf-8")
    return summary


def plot_benchmark_timeline(record: dict, path: Path) -> Path:
    plt = _pyplot()
    measurement = record["measurement"]
    unit = record.get("unit") or "batch"
    figure, ax = plt.subplots(figsize=(9, 2.6))
    _timeline(ax, record["benchmark_id"], measurement, unit=unit, round_lengths=record.get("round_lengths"))
    ax.set_xlabel(f"steady {unit} (rounds joined" + ("; grey lines: round boundaries)" if record.get("round_lengths")
                                                     else ")"))
    return _save(plt, figure, path)


def _ratio_rows(records: list[dict]) -> list[dict]:
    rows = []
    for record in records:
        for metric, value in record.get("metrics", {}).items():
            if not metric.endswith("_ratio") or metric == "variation_ratio" or value is None:
                continue
            rows.append({"benchmark_id": record["benchmark_id"], "metric": metric, "value": value,
                         "rounds": (record.get("ratio_rounds") or {}).get(metric) or []})
    return rows


def plot_ratios(rows: list[dict], path: Path) -> Path:
    """Every ratio metric of the run: the recorded value (the median of its rounds) and each round's ratio."""
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    ys = list(range(len(rows)))[::-1]
    for y, row in zip(ys, rows):
        if row["rounds"]:
            ax.plot(row["rounds"], [y] * len(row["rounds"]), "|", color="grey", markersize=10)
            ax.plot([min(row["rounds"]), max(row["rounds"])], [y, y], color="grey", linewidth=0.8)
        ax.plot([row["value"]], [y], "o", color="tab:blue")
    ax.axvline(1.0, color="black", linewidth=0.8)
    values = [v for row in rows for v in [row["value"], *row["rounds"]]] + [1.0]
    if all(v > 0 for v in values):  # ratios of 0.3 and 9 side by side: a log axis, plain tick labels
        from matplotlib.ticker import FormatStrFormatter, NullFormatter

        low, high = min(values) / 1.3, max(values) * 1.3
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.set_xticks([t * 10.0**e for e in range(-3, 4) for t in (1, 2, 5) if low <= t * 10.0**e <= high])
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(ys, [f"{row['metric']}  [{row['benchmark_id'].split('::', 1)[-1]}]" for row in rows], fontsize=7)
    ax.set_xlabel("ratio (dot: recorded median; ticks: per round)")
    ax.set_title("same-run ratios", fontsize=9)
    return _save(plt, figure, path)


def benchmark_summary(records: list[dict], timelines: dict, ratios: list[dict], ratio_plot: str | None, *,
                      title: str) -> str:
    def number(value):
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
        return str(value)

    lines = [f"# {title}", "", f"{len(records)} benchmark(s) measured through the perfsuite fixture.", "",
             "| benchmark | outcome | samples/s | median batch s | variation | cycle | other metrics |",
             "|---|---|---|---|---|---|---|"]
    for record in records:
        m = record.get("measurement") or {}
        cycle = "-" if not m else (f"every {m['cycle_period']}" if m.get("cycle_significant") else "none")
        others = ", ".join(f"{k} {number(v)}" for k, v in record.get("metrics", {}).items()
                           if k not in ("samples_per_s", "batches_per_s", "variation_ratio", "robust_cv"))
        lines.append(f"| {record['benchmark_id']} | {record.get('outcome', '-')} | {number(m.get('samples_per_s'))} | "
                     f"{number(m.get('batch_median_s'))} | {number(m.get('variation_ratio'))} | {cycle} | "
                     f"{others or '-'} |")
    if ratios:
        lines += ["", "## Ratios", "", "| benchmark | metric | value | per-round range |", "|---|---|---|---|"]
        for row in ratios:
            spread = f"{min(row['rounds']):.3g}–{max(row['rounds']):.3g}" if row["rounds"] else "-"
            lines.append(f"| {row['benchmark_id']} | {row['metric']} | {number(row['value'])} | {spread} |")
        lines += ["", f"![ratios]({ratio_plot})"]
    if timelines:
        lines += ["", "## Per-batch times", ""]
        for benchmark_id, name in timelines.items():
            lines += [f"### {benchmark_id}", "", f"![{benchmark_id}]({name})", ""]
    return "\n".join(lines) + "\n"
