"""The report of a diagnosis (`perfsuite diagnose --report DIR`): PNG plots and a Markdown summary, each
figure with its interval and rounds; an interrupted run's parts not measured are left out, and said so."""

from __future__ import annotations

from pathlib import Path

from perfsuite.measure.utilisation import GpuTimeline
from perfsuite.plotting import draw_timeline, pyplot, save
from perfsuite.tables import RIGHT, Table
from perfsuite.tools.capacity_report import capacity_lines, plot_capacity
from perfsuite.verdict.capacity import change_first_lines
from perfsuite.verdict.diagnosis import (
    CHANGE_FIRST,
    change_first_words,
    feed_words,
    point_label,
    ranked_changes,
    stand_in_step,
)
from perfsuite.verdict.diagnosis_figures import MIN_ROUNDS, DataSummary, FeedFigures, SweepAxis, interval_cell
from perfsuite.verdict.diagnosis_record import Diagnosis

_percent = "{:.1%}".format
_times = "{:.2f}x".format
_yes_no = {True: "yes", False: "no"}


def write_report(diagnosis, directory: Path) -> Path:
    """Write the plots and summary.md into directory; return its path. diagnosis: a Diagnosis or its dict."""
    if isinstance(diagnosis, dict):
        diagnosis = Diagnosis.from_dict(diagnosis)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    plots, throughput, capacity = [], diagnosis.throughput, diagnosis.capacity
    if throughput is not None and throughput.batch_s:
        per_round = throughput.batches_per_round
        plots.append(plot_batch_timeline([(diagnosis.target.pipeline, throughput.batch_s, throughput.rate.median,
                                           throughput.cycle, [per_round] * (len(throughput.batch_s) // per_round))],
                                         directory / "batch_timeline.png"))
    plots += [plot_sweep(axis, directory / f"throughput_vs_{axis.axis}.png") for axis in diagnosis.sweep]
    if diagnosis.gpu is not None and diagnosis.gpu.available and diagnosis.gpu.timeline:
        plots.append(plot_gpu_timeline(diagnosis.gpu.timeline, directory / "gpu_utilisation.png"))
    if capacity is not None and any(stage.cost is not None for stage in capacity.stages):
        plots.append(plot_capacity(capacity, directory / "capacity.png"))
    if (feed := diagnosis.feed) is not None and feed.timeline:
        title = f"{feed.pipeline} feeding a {feed.step_s * 1e3:.3g} ms step ({feed.step_time})"
        plots.append(plot_gpu_timeline(feed.timeline, directory / "emulated_feed.png", title=title))
    summary = directory / "summary.md"
    summary.write_text(markdown_summary(diagnosis, [p.name for p in plots]), encoding="utf-8")
    return summary


def plot_batch_timeline(timelines: list[tuple], path: Path) -> Path:
    """One panel of batch times per (label, batch_s, samples/s, stats.Cycle or None, batches per round)."""
    plt = pyplot()
    figure, axes = plt.subplots(len(timelines), 1, figsize=(9, 0.4 + 2.2 * len(timelines)), squeeze=False)
    for ax, (label, batch_s, rate, cycle, rounds) in zip(axes[:, 0], timelines):
        period = cycle.period if cycle is not None and cycle.significant else None
        draw_timeline(ax, label, batch_s, rate, period, round_lengths=rounds)
    axes[-1, 0].set_xlabel("steady batch (rounds joined; grey lines: round boundaries)")
    return save(plt, figure, path)


def plot_sweep(sweep: SweepAxis, path: Path) -> Path:
    """The sweep's samples/s per point (left) and each round's ratio to the current setting (right)."""
    plt = pyplot()
    points, label = sweep.points, sweep.axis.replace("_", " ")
    names = [point_label(sweep.axis, point.point) for point in points]
    xs = list(range(len(points)))
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    errors = [[point.samples_per_s - point.samples_per_s_low for point in points],
              [point.samples_per_s_high - point.samples_per_s for point in points]]
    left.errorbar(xs, [point.samples_per_s for point in points], yerr=errors, fmt="o-", capsize=4, color="tab:blue",
                  label="median, range")
    for x, point in zip(xs, points):
        left.plot([x] * len(point.samples_per_s_rounds), point.samples_per_s_rounds, ".", color="grey", alpha=0.7)
        if point.current:
            left.plot([x], [point.samples_per_s], "s", markersize=11, markerfacecolor="none", color="tab:orange",
                      label="current setting")
        gain = point.vs_current
        ratios = [1.0] * sweep.rounds if gain is None else gain.ratios
        colour = "tab:orange" if gain is None else ("tab:green" if gain.significant else "tab:grey")
        right.plot([x] * len(ratios), ratios, "o", color=colour, alpha=0.8)
        if gain is not None:
            right.plot([x - 0.2, x + 0.2], [gain.summary.median] * 2, color=colour, linewidth=2)
    left.set(ylabel="samples/s", ylim=(0, None))
    left.legend(fontsize=7, loc="lower right")
    left.set_title(f"tf_native WAV loader vs {label} ({sweep.rounds} interleaved rounds)", fontsize=9)
    right.axhline(1.0, color="black", linewidth=0.8)
    right.axhline(1 + sweep.min_gain, color="tab:green", linestyle="--", linewidth=0.8,
                  label=f"+{sweep.min_gain:.0%}: minimum gain")
    right.set_ylabel("samples/s ÷ current, per round")
    right.legend(fontsize=7)
    clear = [name for name, point in zip(names, points) if point.vs_current and point.vs_current.significant]
    verdict = f"clear gain: {', '.join(clear)}" if clear else "no clear winner over the current setting"
    right.set_title(f"same-round ratio to current ({verdict})", fontsize=9)
    for ax in (left, right):
        ax.set_xticks(xs, names, fontsize=7)
        ax.set_xlabel(label)
    return save(plt, figure, path)


def plot_gpu_timeline(timeline: GpuTimeline, path: Path, title: str | None = None) -> Path:
    """Utilisation of each sampled device over a window (NVML's, or an emulated accelerator's)."""
    plt = pyplot()
    figure, ax = plt.subplots(figsize=(9, 3))
    if title:
        ax.set_title(title, fontsize=9)
    for device in timeline.devices:
        ax.plot([t - timeline.start for t in device.util_timestamps], device.util, label=f"GPU {device.index}")
    ax.set(xlabel="seconds", ylabel="utilisation %", ylim=(0, 100))
    ax.legend(fontsize=8)
    return save(plt, figure, path)


def markdown_summary(diagnosis: Diagnosis, plot_names: list[str]) -> str:
    """summary.md: what to change first (measured changes ranked by gain), each part measured, the plots."""
    target, graph = diagnosis.target, diagnosis.graph
    lines = [f"# perfsuite diagnose {target.dataset or '--pipeline ' + target.pipeline}", ""]
    if target.step or target.args or target.dataset:
        lines += [(f"Pipeline: {target.pipeline}; step: {target.step or '(none: throughput only)'}; arguments: "
                  f"{target.args or '(none)'}."), ""]
    changes, rest = ranked_changes(list(diagnosis.verdicts))
    lines += [f"## {CHANGE_FIRST.capitalize()}", "", f"{change_first_words(changes).capitalize()}.", ""]
    lines += [line for rank, change in enumerate(changes, 1) for line in _finding_lines(change, f"{rank}. ")]
    lines += [f"- {line}" for line in change_first_lines(diagnosis.capacity)]
    lines += ["", *_stage_lines(diagnosis), *_data_lines(diagnosis.data), "## The other findings", "",
              *(line for verdict in rest for line in _finding_lines(verdict, "- "))]
    if graph is not None:
        lines += [*_section("Dataset graph", f"Transformations: {' -> '.join(graph.transformations)}", "",
                            f"Element: `{graph.element_spec}`"), ""]
    if graph is not None and graph.python_ops:
        lines.append(Table.of(("Python op", "node", "in", "transformation node", "calls"),
                              [(op.op, op.node, op.transformation, op.transformation_node, op.python or "-")
                               for op in graph.python_ops]).markdown())
    throughput, step, bound = diagnosis.throughput, diagnosis.step, diagnosis.input_bound
    if throughput is not None:
        warmup = ", ".join(f"{s:.3f}" for s in throughput.warmup_s)
        lines += _section("Throughput", (
            f"First batch {throughput.first_batch_s:.3f} s; warm-up {warmup} s; {throughput.batches_per_round} "
            f"batches per round; {throughput.restarts} restart(s) of the dataset."),
            "", f"- {throughput.unit}/s: {interval_cell(throughput.rate, '{:.4g}'.format)}",
            f"- per-batch variation: {interval_cell(throughput.variation, _percent)}")
    if step is not None:
        retraces = "not countable" if step.retraces is None else step.retraces
        lines += _section("Step", f"First call {step.first_s:.3f} s, then {step.first_steady_s:.4f} s; "
                                  f"{step.calls} calls; retraces: {retraces}.")
    if bound is not None:
        lines += _section("Input-bound share", (
            f"- share: {interval_cell(bound.share, _percent)} ({bound.classification} at the median); wait share "
            f"{interval_cell(bound.wait, _percent)}; s/step fed {bound.t_real:.4f}, synthetic "
            f"{bound.t_synthetic:.4f}; {bound.warmup} untimed + {bound.batches} timed steps per side"))
    lines += capacity_lines(diagnosis.capacity)
    lines += _feed_lines(diagnosis.feed)
    lines += [*_sweep_drift_note(diagnosis), *(line for sweep in diagnosis.sweep for line in _sweep_lines(sweep))]
    if diagnosis.gpu is not None:
        lines += _section("GPU", "sampled" if diagnosis.gpu.available else f"not available: {diagnosis.gpu.reason}")
    return "\n".join([*lines, "", "## Plots", "", *(f"![{name}]({name})" for name in plot_names), ""])


def _section(title: str, *lines: str) -> list[str]:
    """A '## title' section: a blank line, the heading, a blank line, then lines."""
    return ["", f"## {title}", "", *lines]


def _stage_lines(diagnosis) -> list[str]:
    lines = []
    if not diagnosis.complete:
        ran = ", ".join(stage.name for stage in diagnosis.stages) or "none"
        lines += [(f"**Incomplete**: the run ended early (interrupted); stages that ran: {ran}. Parts not measured "
                  "are left out."), ""]
    lines += [(f"Budget {diagnosis.settings.budget_s:.0f} s, {diagnosis.elapsed_s:.0f} s spent. Each stage measures "
               f"until its figures are decided or its share is spent; a figure of fewer than {MIN_ROUNDS} rounds is "
               "not enough to decide."), ""]
    rows = [(stage.name, stage.status, f"{stage.share_s:.0f}", f"{stage.spent_s:.0f}", stage.rounds, stage.plan)
            for stage in diagnosis.stages]
    return [*lines, Table.of(("stage", "status", "share s", "spent s", "rounds", "plan"), rows,
                             ("left", "left", RIGHT, RIGHT, RIGHT, "left")).markdown(), ""]


def _data_lines(data: DataSummary | None) -> list[str]:
    if data is None:
        return []
    repeat = data.repeat
    lines = [(f"Checked {data.checked} utterance(s); {data.skipped} unreadable file(s) skipped; "
              f"measured on {data.usable}."), ""]
    if repeat.copies > 1:
        lines += [(f"The dataset is smaller than one measurement round ({repeat.round_samples} samples): every "
                   f"utterance was listed {repeat.copies} times ({repeat.utterances_measured} per pass, "
                   "epochs repeated) so that batches are full."), ""]
    return lines


def _finding_lines(verdict, marker: str) -> list[str]:
    """One finding after marker ('- ', '1. '): its topic, words and figures, then its interval and recommendation."""
    indent = " " * len(marker)
    lines = [f"{marker}**{verdict.topic}**: {verdict.finding} ({verdict.evidence_words()})"]
    if verdict.interval is not None:
        lines.append(f"{indent}- interval: {interval_cell(verdict.interval, '{:.4g}'.format)}, "
                     f"{verdict.interval.coverage:.0%} coverage")
    if verdict.recommendation:
        lines.append(f"{indent}- recommendation: {verdict.recommendation}")
    return lines


def _feed_lines(feed: FeedFigures | None) -> list[str]:
    if feed is None:
        return []
    if feed.step_s is None:
        row = (feed.pipeline, feed_words(feed), feed.reason, "-", "-", "-", "-", "-")
    else:
        stats, step = feed.stats, f"{feed.step_s * 1e3:.3g} ms ({feed.step_time})"
        step = f"assumed: {step}, a stand-in" if stand_in_step(feed) else step
        row = (feed.pipeline, feed_words(feed), step, f"{feed.round.busy_fraction:.0%}",
               f"{stats.util_median:.0f} %", f"{stats.idle_fraction:.0%}",
               f"every {stats.oscillation_period_s:.3g} s" if stats.oscillation.significant else "none",
               {**_yes_no, None: "undecided"}[feed.keeps_busy])
    return _section("Emulated accelerator", (
        "The shortest step the pipeline keeps >= 90 % busy (three interleaved bisections; docs/emulated.md), "
        "and one round at the step asked for."), "", Table.of(
        ("pipeline", "feed rate", "step", "busy at the step", "utilisation median", "idle", "oscillation",
         "keeps it busy"), [row]).markdown())


def _sweep_drift_note(diagnosis: Diagnosis) -> list[str]:
    """The preset's loader at the current setting is measured three times (throughput stage, both sweeps):
    when they differ, say so: it shows how far absolute figures drift, why verdicts use same-round ratios."""
    rate = None if diagnosis.throughput is None else diagnosis.throughput.rate
    figures = {"the throughput stage": rate.median} if rate is not None and diagnosis.sweep else {}
    figures.update({f"the {sweep.axis.replace('_', '-')} sweep": next(
        point.samples_per_s for point in sweep.points if point.current) for sweep in diagnosis.sweep})
    values = list(figures.values())
    if len(values) < 2 or min(values) <= 0 or max(values) / min(values) < 1.2:
        return []
    measured = ", ".join(f"{value:.0f} samples/s in {where}" for where, value in figures.items())
    return ["", (f"The current setting's loader was measured {len(values)} times in this run: {measured}. Absolute "
                 "figures moved that much within one run on this machine (other load, what ran just before); the "
                 "verdicts use ratios measured within the same rounds.")]


def _sweep_lines(sweep: SweepAxis) -> list[str]:
    label = sweep.axis.replace("_", " ")
    return _section(f"tf_native WAV loader vs {label}", (
        f"{sweep.rounds} interleaved round(s), current setting {point_label(sweep.axis, sweep.current)}. "
        f"A point is recommended only with a median gain ≥ {sweep.min_gain:.0%}, "
        f"≥ {sweep.min_win_share:.0%} of rounds faster and a paired t-test p < {sweep.alpha}."), "", Table.of(
        (label, "samples/s (median)", "per-round range", "ratio to current (median, interval)", "rounds faster",
         "p", "clear gain"), [_sweep_row(sweep, point) for point in sweep.points]).markdown())


def _sweep_row(sweep: SweepAxis, point) -> tuple:
    gain, name = point.vs_current, point_label(sweep.axis, point.point)
    spread = f"{point.samples_per_s_low:.1f}–{point.samples_per_s_high:.1f}"
    if gain is None:
        return (f"{name} (current)", f"{point.samples_per_s:.1f}", spread, "1", "-", "-", "-")
    return (name, f"{point.samples_per_s:.1f}", spread, interval_cell(point.ratio, _times),
            f"{gain.wins}/{gain.rounds}", "-" if gain.p_value is None else f"{gain.p_value:.2g}",
            _yes_no[gain.significant])
