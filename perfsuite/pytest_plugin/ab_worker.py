"""One side of ``perfsuite ab``: pytest in-process on that side's benchmarks, its rounds driven from outside.

The controller (perfsuite.tools.ab) runs this file as a script (``python -c <boot> ab_worker.py
EVENTS_FD COMMANDS_FD PYTEST_ARGS...``, or the same arguments in a process forked from its fork server)
with the side's source tree as the working directory and first on the import path, so ``perfsuite``
and the benchmarks are that side's. The file itself comes
from the controller's perfsuite and uses only the standard library and pytest at import, so it also
drives a revision older than this file: the side's fixture gets the round driver through the plugin's
public hook ``pytest_perfsuite_round_driver`` (perfsuite.pytest_plugin.hooks) and nothing else; a revision
that predates the hook is refused at the start, saying so.

Protocol: one JSON object per line. Events (worker -> controller): started, collect_error, collected,
ready (a benchmark's warm-up is done; it waits), round (one round's figure; with the process CPU
seconds of the round and per unit of work, and for a compare its two sides' speeds), done (a benchmark's
outcome), finished, fatal. Commands (controller -> worker): run (the benchmarks to run, in order),
go (one round), stop (no more rounds for this measurement), skip (skip this benchmark). A worker whose
controller has gone (end of file on its commands) exits at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
import traceback

import pytest

EXIT_CONTROLLER_GONE = 70


class Channel:
    """The pipes to the controller: events out, commands in, one JSON object per line. With ``freeze``
    the worker stops its own process group (SIGSTOP) after each ready and round event, at the exact
    end of its warm-up or round, until the controller continues it for its next command."""

    def __init__(self, events_fd: int, commands_fd: int, *, freeze: bool = False):
        self._events = os.fdopen(events_fd, "w", encoding="utf-8", buffering=1)
        self._commands = os.fdopen(commands_fd, "r", encoding="utf-8")
        self.freeze = freeze

    def send_and_freeze(self, event: str, **fields) -> None:
        self.send(event, **fields)
        if self.freeze:
            os.killpg(0, signal.SIGSTOP)

    def send(self, event: str, **fields) -> None:
        try:
            self._events.write(json.dumps({"event": event, **fields}) + "\n")
            self._events.flush()
        except (BrokenPipeError, OSError):
            os._exit(EXIT_CONTROLLER_GONE)

    def receive(self) -> dict:
        line = self._commands.readline()
        if not line:  # the controller has gone: nothing is left to measure for
            os._exit(EXIT_CONTROLLER_GONE)
        return json.loads(line)


class RoundDriver:
    """The Recorder's round_driver (a measure.rounds.RoundDriver): each round runs when the controller
    says "go", and its figure goes back to the controller (``_asked``, the loop of every round here). rounds(): samples/s of each round of measure_dataset / measure_step (after
    the Recorder's own calibration round) and the process CPU time it took per sample (all threads:
    "more work" raises it, waiting for a core does not, busy waiting does); pairs(): the per-round
    ratio of a compare benchmark and its two sides' speeds (one warm-up pair first, then one pair per
    round, A first and B first in turn)."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.nodeid = ""
        self.index = 0
        # A named side: its rounds, their unit, and the measurement that took them when it was not the
        # compare's own (its row: {"nodeid", "index"}), else None.
        self.sides_measured: dict[str, tuple[tuple[float, ...], str, dict | None]] = {}
        # Every measurement's round function, and so the iterator its rounds drew from, is kept until the
        # worker ends, which skips their teardown: tf.data takes seconds to tear a loader's iterator down
        # after frozen rounds (docs/ab.md, "Kept iterators"), every benchmark, every pass. Kept iterators
        # idle once their buffers are full; each side keeps the same ones.
        self.kept: list = []

    def start(self, nodeid: str) -> None:
        self.nodeid, self.index = nodeid, 0

    def rounds(self, one_round, *, side: str | None = None) -> list:
        """Rounds of measure_dataset / measure_step; ``side``: they measure the named side of that name
        (Recorder.measure_dataset), so a later compare naming it in this process takes them."""
        self.kept.append(one_round)
        row = {"nodeid": self.nodeid, "index": self.index}
        self._ready("rounds", "samples_per_s")
        results = self._asked(lambda index: one_round(),
                              lambda result, seconds, cpu_s: _speed_event(float(result.samples_per_s), seconds, cpu_s))
        if side is not None and side not in self.sides_measured:
            self.sides_measured[side] = (tuple(float(r.samples_per_s) for r in results), "samples/s", row)
        return results

    def pairs(self, a, b, *, name: str, sides: tuple[str, str] | None = None):
        from perfsuite.measure import timing
        from perfsuite.measure.rounds import interleaved

        if sides is not None:
            return self._named_sides(a, b, name=name, sides=sides)
        # The side's own measure.rounds.interleaved (in every revision with the hook) runs each pair; its figures
        # are timing.round_value's (value, unit).
        runs = {"A": lambda: timing.round_value(a(), "a"), "B": lambda: timing.round_value(b(), "b")}
        # Warm-up: one pair (A then B), discarded: each side's first call (its start-up: first batches,
        # tracing) is no round. One pair, not the Recorder's two: every pass pays it on both sides.
        interleaved(runs, rounds=1)
        self._ready("pairs", name)
        # A first in even rounds, B first in odd ones: the round's order from its index
        def event(pair, seconds, cpu_s):
            result = _ab_result(*pair)
            return {"value": float(result.ratios[0]), "seconds": seconds, "parts": _speeds(result)}

        pairs = self._asked(lambda index: interleaved(runs, rounds=1, start=index), event)
        return _ab_result({label: [figure for values, _ in pairs for figure in values[label]] for label in "AB"},
                          [order for _, orders in pairs for order in orders])

    def _named_sides(self, a, b, *, name: str, sides: tuple[str, str]):
        """A compare whose sides are named: each side's own rounds, compared A against B across the
        workers like any benchmark, the ratio's change derived from its sides' by the controller (told
        by a "ratio" event). A side is measured once per worker: a later compare naming the same side
        (by its contract, the same measurement) takes the rounds already measured in this process for
        the result its test sees, and the controller compares that side once. So does a side that a
        measure_dataset named: the ratio event says which row measured it (``measured_by``)."""
        (a_values, unit, a_row), (b_values, b_unit, b_row) = (self._side(run, side) for run, side in zip((a, b), sides))
        if unit != b_unit:
            raise TypeError(f"sides {sides}: expected both to return the same kind of value, found {unit}, {b_unit}")
        self.channel.send("ratio", nodeid=self.nodeid, name=name, sides=list(sides), measured_by=[a_row, b_row])
        n = min(len(a_values), len(b_values))
        figures = {"A": [(value, unit) for value in a_values[:n]], "B": [(value, unit) for value in b_values[:n]]}
        return _ab_result(figures, [("A", "B")] * n)

    def _side(self, run, side: str) -> tuple[tuple[float, ...], str, dict | None]:
        """One named side's rounds (its values, its unit, None) after one warm-up call, or those measured
        for it earlier in this process (with the row of the measure_dataset that took them)."""
        from perfsuite.measure import timing

        if side not in self.sides_measured:
            _, unit = timing.round_value(run(), side)  # warm-up: its start-up is no round
            # continues: the side's rounds draw from one iterator (Recorder.compare_datasets), not each
            # from a fresh one; sides measured differently are not compared.
            self._ready("rounds", "samples_per_s" if unit == "samples/s" else "calls_per_s", side=side,
                        continues=bool(getattr(run, "continues", False)))

            def event(figure, seconds, cpu_s):  # a speed either way: higher is better
                value, unit = figure
                return _speed_event(1 / value if unit == "s" else value, seconds, cpu_s)

            figures = self._asked(lambda index: timing.round_value(run(), side), event)
            self.kept.append(run)
            self.sides_measured[side] = (tuple(value for value, _ in figures), figures[0][1], None)
        return self.sides_measured[side]

    def _asked(self, one_round, event) -> list:
        """one_round(index) for each round the controller asks for (index 0, 1, ...), until it says
        stop; after each, a round event of the fields event(result, seconds, process CPU seconds) gives,
        the process then frozen. Their results; a skip where it asked for none."""
        results = []
        while self._go():
            start, cpu_start = time.perf_counter(), time.process_time()
            results.append(one_round(len(results)))
            seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
            self.channel.send_and_freeze("round", **event(results[-1], seconds, cpu_s))
        if not results:
            pytest.skip("perfsuite ab: stopped before any round")
        return results

    def _ready(self, kind: str, metric: str, **fields) -> None:
        self.channel.send_and_freeze("ready", nodeid=self.nodeid, index=self.index, kind=kind, metric=metric,
                                     **fields)
        self.index += 1

    def _go(self) -> bool:
        command = self.channel.receive()
        if command.get("cmd") == "skip":
            pytest.skip(f"perfsuite ab: {command.get('reason', 'skipped by the controller')}")
        return command.get("cmd") == "go"


def _speed_event(speed: float, seconds: float, cpu_s: float) -> dict:
    """A round event's fields for a speed: with the process CPU seconds of the round and per unit of work."""
    return {"value": speed, "seconds": seconds, "cpu_s": cpu_s,
            "cpu_per_unit": cpu_s / (speed * seconds) if speed * seconds > 0 else None}


def _speeds(pair) -> list[float]:
    """The pair's two sides as speeds (samples/s, or 1 / seconds of their fixed work): the ratio's
    numerator (compare's a) and denominator (b), so the controller can compare each across revisions."""
    return [float(1 / v if pair.unit == "s" else v) for v in (pair.a_values[0], pair.b_values[0])]


def _ab_result(values: dict, orders):
    """The side's timing.ABResult of rounds of timing.round_value figures ({"A": [(value, unit)], "B": ...},
    each round's order), built from the fields it has in every revision with the hook."""
    from perfsuite.measure import stats, timing

    (a_values, a_units), (b_values, b_units) = (zip(*values[label]) for label in "AB")
    units = sorted(set(a_units + b_units))
    if len(units) != 1:
        raise TypeError(f"a, b: expected both to return the same kind of value, found {units}")
    unit = a_units[0]
    ratios = stats.ratio_of(b_values, a_values) if unit == "s" else stats.ratio_of(a_values, b_values)
    kept = {field.name for field in dataclasses.fields(timing.ABResult)}  # a revision before one record keeps
    summary = {"summary": stats.ratio_summary(ratios)} if "summary" in kept else {}  # the summary, later derived
    return timing.ABResult(a_values=a_values, b_values=b_values, unit=unit, ratios=ratios,
                           order=tuple("".join(order) for order in orders), **summary)


HOOK = "hook"  # how a side's fixture gets the driver (install): the plugin's public hook, the only way


def install(config) -> str:
    """How the side's fixture gets the driver: through the plugin's hook pytest_perfsuite_round_driver
    (HOOK: WorkerPlugin implements it; the plugin puts its answer on the session's context). A revision
    without the hook cannot be driven: RuntimeError."""
    if hasattr(config.hook, "pytest_perfsuite_round_driver"):
        return HOOK
    raise RuntimeError("this revision's perfsuite: expected the hook pytest_perfsuite_round_driver (its "
                       "pytest_plugin/hooks.py), found none: too old for perfsuite ab")


def _short(report) -> str:
    """One line saying why a phase failed or skipped."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message).splitlines()[0][:500]
    lines = [line for line in str(report.longreprtext).splitlines() if line.strip()]
    return (lines[-1] if lines else report.outcome)[:500]


def _not_in_ab(item) -> str:
    """The reason a benchmark marked not_in_ab gives (its marker's reason= or first argument)."""
    marker = item.get_closest_marker("not_in_ab")
    return str(marker.kwargs.get("reason") or (marker.args[0] if marker.args else "marked not_in_ab"))


class WorkerPlugin:
    """Keeps the collection in the controller's order and reports each benchmark's outcome."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.driver = RoundDriver(channel)
        self.outcomes: dict[str, tuple[str, str]] = {}
        self.last = ""  # the last benchmark the controller asked for
        self.any_failed = False
        self.how = ""  # install's answer

    @pytest.hookimpl(optionalhook=True)
    def pytest_perfsuite_round_driver(self, config):
        return self.driver

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session):
        import perfsuite

        try:
            self.how = install(session.config)
        except Exception as error:  # the side's perfsuite is not one this worker can drive
            self.channel.send("fatal", message=f"{type(error).__name__}: {error}")
            raise
        self.channel.send("started", perfsuite=os.path.dirname(perfsuite.__file__), driver=self.how,
                          python=sys.version.split()[0])

    def pytest_collectreport(self, report):
        if report.failed:
            self.channel.send("collect_error", nodeid=report.nodeid, message=_short(report))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        left_out = {item.nodeid: _not_in_ab(item) for item in items if item.get_closest_marker("not_in_ab")}
        self.channel.send("collected", items=[item.nodeid for item in items if item.nodeid not in left_out],
                          left_out=left_out)
        command = self.channel.receive()
        wanted = command.get("items", [])
        by_id = {item.nodeid: item for item in items}
        dropped = [item for item in items if item.nodeid not in set(wanted)]
        items[:] = [by_id[nodeid] for nodeid in wanted if nodeid in by_id]
        self.last = items[-1].nodeid if items else ""
        if dropped:
            config.hook.pytest_deselected(items=dropped)

    def pytest_runtest_logstart(self, nodeid, location):
        self.driver.start(nodeid)

    def pytest_runtest_logreport(self, report):
        outcome = self.outcomes.get(report.nodeid)
        if report.failed and (outcome is None or outcome[0] != "failed"):
            self.outcomes[report.nodeid] = ("failed", f"{report.when}: {_short(report)}")
        elif report.skipped and outcome is None:
            self.outcomes[report.nodeid] = ("skipped", _short(report))

    def pytest_runtest_logfinish(self, nodeid, location):
        outcome, message = self.outcomes.pop(nodeid, ("passed", ""))
        self.any_failed = self.any_failed or outcome == "failed"
        self.channel.send("done", nodeid=nodeid, outcome=outcome, message=message)
        if nodeid == self.last and not self.any_failed:
            # Nothing is left for the controller: skip the session's summary and teardown (seconds of every
            # pass). A failure's traceback is printed at the session's end, so a side with one finishes it.
            _finish(self.channel, 0)


def _die_with_controller() -> None:
    """Linux: SIGKILL this worker when its controller dies, even while it is frozen (a frozen process
    would otherwise wait for a SIGCONT forever); elsewhere the controller's cleanup is all there is."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main(argv: list[str]) -> None:
    """argv: EVENTS_FD COMMANDS_FD PYTEST_ARGS... (run by the controller: frozen between rounds)"""
    _die_with_controller()
    channel = Channel(int(argv[0]), int(argv[1]), freeze=True)
    status = 1
    try:
        status = int(pytest.main(argv[2:], plugins=[WorkerPlugin(channel)]))
    except BaseException as error:  # noqa: BLE001 - an import failure of the side's perfsuite, say: told, then exit
        channel.send("fatal", message="".join(traceback.format_exception_only(type(error), error)).strip())
        traceback.print_exc()
    _finish(channel, status)


def _finish(channel: Channel, status: int) -> None:
    channel.send("finished", exitstatus=status)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)  # no teardown of the kept iterators (RoundDriver.kept): the controller ends the worker


if __name__ == "__main__":
    main(sys.argv[1:])
