"""The controller's loop of ``perfsuite ab`` (pyperf's ``_runner``): per pass, fresh workers on both
sides (perfsuite.tools.ab.manager), every benchmark driven round by round, A then B, the order
reversed every round; a benchmark still undecided after its passes gets more; the decision is
perfsuite.verdict.ab's."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from perfsuite.errors import PerfsuiteError
from perfsuite.measure.rounds import BUDGET_SPENT, InterleavedRounds, until_decided
from perfsuite.tools.ab.manager import (
    SIDES,
    ABError,
    ForkServer,
    SideFailure,
    Worker,
    checkouts,
    log_tail,
    workers,
)
from perfsuite.tools.ab.results import (
    ABReport,
    Measured,
    NotCompared,
    Options,
    decided,
    derived_ratios,
    joined,
)


@dataclass(frozen=True)
class Collected:
    """What the workers collected and said before the rounds."""

    common: list[str]
    only: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)  # node id: why (marked not_in_ab)


def display_name(nodeid: str, index: int = 0) -> str:
    name = nodeid.split("benchmarks/", 1)[-1]
    return name if index == 0 else f"{name} (measurement {index + 1})"


def side_name(nodeid: str, side: str) -> str:
    """The row of a compare's named side: one per test function and side, whichever of its
    parametrized compares measured it."""
    return f"{display_name(nodeid.split('[', 1)[0])} side {side}"


def ratio_rows(event: dict) -> tuple[str, str]:
    """The rows of a ratio event's two sides: the compare's own side row, or the row of the measurement
    that took the side's rounds (``measured_by``: a measure_dataset naming that side)."""
    rows = event.get("measured_by") or (None, None)
    return tuple(side_name(event["nodeid"], side) if row is None else display_name(row["nodeid"], row["index"])
                 for side, row in zip(event["sides"], rows))


def _higher_is_better(metric: str) -> bool:
    from perfsuite.verdict import metrics

    try:
        return metrics.lookup(metric).better == metrics.HIGHER
    except PerfsuiteError:
        return True


class Controller:
    """Drives both workers benchmark by benchmark, in the same order, round by round."""

    def __init__(self, pool: dict[str, Worker], settings, options: Options, progress: Callable[[str], None],
                 *, per_benchmark_s: float, only: set[str] | None = None):
        """only: the node ids to run (None: every benchmark both sides collected); per_benchmark_s: the
        seconds of rounds each measurement gets (a pass's: options.pass_s; the passes keep options.budget_s)."""
        self.pool, self.settings, self.options, self.progress = pool, settings, options, progress
        self.only, self.per_benchmark_s = only, per_benchmark_s
        self.scheduled: list[str] = []
        self.measured: list[Measured] = []
        self.not_compared: list[NotCompared] = []
        self.notes: list[str] = []
        self.failures: list[SideFailure] = []  # benchmarks that raised on a side: the run fails (exit 3)
        self.ratios: dict[str, tuple[str, str]] = {}  # a compare of named sides: its sides' rows
        self.spent_s = 0.0

    def run(self) -> None:
        collected = self.collect()
        self.notes += collected.notes
        self.not_compared += [NotCompared(display_name(n), f"not_in_ab: {why}") for n, why in collected.left_out.items()]
        for side, nodeids in collected.only.items():
            other = "B" if side == "A" else "A"
            self.not_compared += [NotCompared(display_name(n), f"only on side {side} (not collected on {other})")
                                  for n in nodeids]
        self.scheduled = [n for n in collected.common if self.only is None or n in self.only]
        for worker in self.pool.values():
            worker.send("run", items=self.scheduled)
        for position, nodeid in enumerate(self.scheduled):
            self.progress(f"[{position + 1}/{len(self.scheduled)}] {display_name(nodeid)}")
            self.benchmark(nodeid, count=len(self.scheduled))
        for worker in self.pool.values():
            self._until(worker, "finished", waiting_for="finishing the pytest session")

    def collect(self) -> Collected:
        items, notes, left_out = {}, [], {}
        for name, worker in self.pool.items():
            while True:
                event = worker.receive(timeout=self.options.setup_timeout_s, waiting_for="collecting benchmarks")
                kind = event.get("event")
                if kind == "started":
                    notes += self._started(worker, event)
                elif kind == "collect_error":
                    notes.append(f"side {name}: collection error in {event['nodeid']}: {event['message']}")
                elif kind == "collected":
                    items[name] = event["items"]
                    left_out.update(event.get("left_out", {}))
                    break
                elif kind == "finished":
                    raise worker.failure(f"pytest stopped (exit status {event.get('exitstatus')}) before collecting "
                                         "any benchmark")
        in_b = set(items["B"])
        common = [n for n in items["A"] if n in in_b]
        only = {side: [n for n in items[side] if n not in set(common)] for side in SIDES}
        return Collected(common, {k: v for k, v in only.items() if v}, notes, left_out)

    def _started(self, worker: Worker, event: dict) -> list[str]:
        imported = Path(event.get("perfsuite", ""))
        notes = [f"side {worker.side.name}: rounds driven through the hook pytest_perfsuite_round_driver"]
        if worker.side.root.resolve() not in imported.resolve().parents:
            notes.append(f"side {worker.side.name}: imports perfsuite from {imported}, not from its own tree "
                         f"{worker.side.root} (the revision has no perfsuite package of its own?)")
        return notes

    def _until(self, worker: Worker, kind: str, *, waiting_for: str) -> dict:
        while True:
            event = worker.receive(timeout=self.options.setup_timeout_s, waiting_for=waiting_for)
            if event.get("event") == kind:
                return event

    def benchmark(self, nodeid: str, *, count: int) -> None:
        """Every measurement of one benchmark: driven when both sides wait with the same one, skipped on
        the side that waits alone; the outcomes of both sides noted."""
        pending: dict[str, dict | None] = dict.fromkeys(SIDES)
        done: dict[str, dict | None] = dict.fromkeys(SIDES)
        compared = failed = False
        name = display_name(nodeid)
        while not all(done.values()):
            for side in SIDES:
                if pending[side] is None and done[side] is None:
                    event = self.pool[side].receive(timeout=self.options.setup_timeout_s, benchmark=name,
                                                    waiting_for="running it (setup, warm-up or teardown)")
                    if event.get("event") == "ready":  # warmed up: frozen until its first round
                        self.pool[side].wait_frozen(benchmark=name)
                        pending[side] = event
                    elif event.get("event") == "done":
                        done[side] = event
                    elif event.get("event") == "ratio":
                        self.ratios[display_name(event["nodeid"])] = ratio_rows(event)
                    elif event.get("event") == "finished":
                        raise self.pool[side].failure("pytest finished before this benchmark ran", benchmark=name)
            a, b = pending["A"], pending["B"]
            if a is not None and b is not None:
                if all(a.get(key) == b.get(key) for key in ("index", "side", "continues")):
                    ended = self.drive(a, b, count=count)
                    done.update(ended)
                    compared, failed = compared or not ended, failed or bool(ended)
                else:
                    for side in SIDES:
                        self.pool[side].send("skip", reason="the sides' measurements of this benchmark differ")
                pending = dict.fromkeys(SIDES)
            for side, other in (("A", "B"), ("B", "A")):
                if pending[side] is not None and done[other] is not None:
                    self.pool[side].send("skip", reason=f"side {other} finished this benchmark without it")
                    pending[side] = None
        if not failed:  # a failure during a round is reported where it happened
            self._outcomes(nodeid, done, compared)

    def _outcomes(self, nodeid: str, done: dict, compared: bool) -> None:
        name = display_name(nodeid)
        bad = {s: e for s, e in done.items() if e["outcome"] != "passed"}
        if compared:
            for side, event in bad.items():
                self.notes.append(f"{name}: side {side} {event['outcome']} after its rounds: {event['message']}")
            return
        if len(bad) == 2 and all(e["outcome"] == "skipped" for e in bad.values()):
            self.not_compared.append(NotCompared(name, f"skipped: {bad['A']['message']}"))
        elif any(e["outcome"] == "failed" for e in bad.values()):
            self.failures += [self.pool[s].failure(f"the benchmark {e['outcome']}: {e['message']}", benchmark=name)
                              for s, e in bad.items() if e["outcome"] == "failed"]
        elif bad:
            self.not_compared.append(NotCompared(name, "; ".join(
                f"side {s} {e['outcome']}: {e['message']}" for s, e in bad.items())))
        else:
            self.not_compared.append(NotCompared(name, "no controller-driven rounds (measure_dataset, "
                                                       "measure_step or compare with the budget's rounds)"))

    def drive(self, a_ready: dict, b_ready: dict, *, count: int) -> dict[str, dict]:
        """Rounds of one measurement, A B then B A and so on, until it is decided (at a look), its share
        of the budget is spent (after min_rounds), or max_rounds; then both sides are told to stop.
        A side whose benchmark fails during a round ends it there (returned: {side: its done event});
        the other side is told to skip it, and the benchmark is a failure of that side (exit status 3)."""
        from perfsuite.verdict.ab import estimate, settled

        nodeid, metric = a_ready["nodeid"], a_ready["metric"]
        name = side_name(nodeid, a_ready["side"]) if a_ready.get("side") else display_name(nodeid, a_ready["index"])
        higher = _higher_is_better(metric)
        allotted = self.per_benchmark_s
        values, seconds, cpu, parts = ({s: [] for s in SIDES} for _ in range(4))
        order, start, so_far = [], time.monotonic(), {}

        def side_round(side: str) -> None:
            worker = self.pool[side]
            worker.send("go")
            event = worker.receive(timeout=self.options.round_timeout_s, benchmark=name,
                                   waiting_for=f"measuring round {len(order) + 1}")
            if event.get("event") == "done":  # the benchmark raised during its round
                other = "B" if side == "A" else "A"
                self.pool[other].send("skip", reason=f"side {side} failed during round {len(order) + 1}")
                self.spent_s += time.monotonic() - start
                problem = f"the benchmark {event['outcome']} during round {len(order) + 1}: {event['message']}"
                if event["outcome"] == "failed":
                    self.failures.append(worker.failure(problem, benchmark=name))
                else:
                    self.not_compared.append(NotCompared(name, f"side {side}: {problem}"))
                raise _RoundEnded(side, event)
            if event.get("event") != "round":
                raise worker.failure(f"expected round {len(order) + 1}'s figure, found {event}", benchmark=name)
            worker.wait_frozen(benchmark=name)
            values[side].append(event["value"])
            seconds[side].append(event["seconds"])
            for store, key in ((cpu, "cpu_per_unit"), (parts, "parts")):
                if event.get(key) is not None:
                    store[side].append(tuple(event[key]) if key == "parts" else event[key])

        rounds = InterleavedRounds({side: functools.partial(side_round, side) for side in SIDES})

        def one_round(index: int) -> None:
            order.append("".join(rounds.one_round()))
            so_far["measured"] = Measured(name, nodeid, metric, higher, tuple(values["A"]), tuple(values["B"]),
                                          tuple(order), tuple(seconds["A"]), tuple(seconds["B"]),
                                          time.monotonic() - start, a_cpu=tuple(cpu["A"]), b_cpu=tuple(cpu["B"]),
                                          a_parts=tuple(parts["A"]), b_parts=tuple(parts["B"]))
            so_far["judged"] = [m.passes()[0] for m in decided([so_far["measured"]])]  # a ratio: both sides settled

        def enough() -> bool:  # every figure settled, or this measurement's share of the budget spent
            return (all(settled(p, self.settings, benchmarks=count) for p in so_far["judged"])
                    or time.monotonic() - start >= allotted)

        # Pairs of rounds (as many A-first as B-first), min_rounds at least, max_rounds at most: the share is
        # looked at with the figures, after each pair, so a measurement may end a pair past it.
        try:
            until_decided(one_round, decided=enough, limit_s=math.inf, max_rounds=self.settings.max_rounds,
                          min_rounds=self.settings.min_rounds, step=2, clock=time.monotonic)
        except _RoundEnded as ended:
            return {ended.side: ended.event}
        measured, judged, n = so_far["measured"], so_far["judged"], len(order)
        for worker in self.pool.values():
            worker.send("stop")
        self.spent_s += time.monotonic() - start
        self.measured.append(replace(measured, elapsed_s=time.monotonic() - start))
        changes = ", ".join(f"{estimate(p, self.settings).change:+.1%}" for p in judged)
        self.progress(f"    {n} rounds in {time.monotonic() - start:.1f} s, median change {changes}")
        return {}


class _RoundEnded(Exception):
    """A side's benchmark ended during a round (its done event): the measurement stops there."""

    def __init__(self, side: str, event: dict):
        super().__init__(side)
        self.side, self.event = side, event



def _load() -> dict:
    with contextlib.suppress(OSError):
        return {"average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    return {"average_1min": None, "cpus": os.cpu_count()}


def compare_revisions(*, repo: Path, base: str, head: str | None, pytest_arguments: list[str], settings,
                      options: Options, progress: Callable[[str], None], logs_to: Path | None = None) -> ABReport:
    """Check both revisions out; per pass, run fresh workers on both and drive every round; decide (see
    the module notes). Sequential: every benchmark gets settings.passes passes, and one still undecided
    at a pass look gets more, up to settings.max_passes, while the budget holds another pass of it
    (each pass gives a benchmark options.pass_s of rounds); a side failure ends the passes."""
    from perfsuite.verdict.ab import decide_revisions

    started, load_before = time.monotonic(), _load()
    scratch = Path(tempfile.mkdtemp(prefix="perfsuite-ab-"))
    failure, controllers, only, server, notes = None, [], None, None, []
    try:
        with checkouts(repo, base, head, scratch) as sides:
            for side in sides:
                progress(side.describe())
                if not (side.root / pytest_arguments[0]).exists():
                    raise ABError(f"side {side.name}: expected benchmarks at {pytest_arguments[0]}, found nothing "
                                  f"there in {side.revision}")
            server = None if options.fresh_workers else _start_fork_server(options, scratch, progress)
            work = _work_first(sides, pytest_arguments, scratch, progress)  # while the fork server imports
            try:
                server, notes = _fork_server(server, options, scratch)
            except SideFailure as error:  # no worker can start: the run fails as a side failure does
                server, failure = None, error
            notes = [*work, *notes]

            def one_pass(index: int) -> None:
                nonlocal failure, only
                count = len(only) if only is not None else None
                suffix = f"-pass{index + 1}" if settings.passes > 1 else ""
                if settings.passes > 1:
                    progress(f"pass {index + 1}: fresh workers on both sides" + (
                        f", {count} undecided benchmark(s)" if count is not None else ""))
                arguments = pytest_arguments if only is None else [*_files_of(only), *pytest_arguments[1:]]
                try:
                    with workers(sides, arguments, scratch, suffix, server) as pool:
                        controllers.append(Controller(pool, settings, options, progress, only=only,
                                                      per_benchmark_s=options.pass_s))
                        controllers[-1].run()
                except SideFailure as error:
                    failure = error
                    return
                only = _undecided(decided(joined([c.measured for c in controllers])), settings)

            # Passes while a benchmark is undecided and the next one fits the budget: its seconds are
            # pass_s a benchmark still undecided, and the budget's clock counts the rounds' seconds only.
            passes = until_decided(one_pass, decided=lambda: failure is not None or only == set(),
                                   max_rounds=settings.max_passes, limit_s=options.budget_s,
                                   clock=lambda: sum(c.spent_s for c in controllers),
                                   next_step_s=lambda: 0.0 if only is None else len(only) * options.pass_s)
            if passes.stopped == BUDGET_SPENT:
                notes.append(f"budget: {options.budget_s:g} s of rounds spent after {passes.rounds} passes; "
                             f"{len(only)} benchmark(s) still undecided")
    finally:
        if server is not None:
            server.close()
        for raised in (f for c in controllers for f in c.failures):  # the log's tail once pytest has ended
            raised.log_tail = log_tail(scratch / raised.log) or raised.log_tail
        if logs_to is not None:
            logs_to.mkdir(parents=True, exist_ok=True)
            for log in [*scratch.glob("worker-*.log"), *scratch.glob("fork-server.log")]:
                shutil.copy(log, logs_to / log.name)
        shutil.rmtree(scratch, ignore_errors=True)
    whole = joined([c.measured for c in controllers])
    measured = tuple(decided(whole))
    verdicts = decide_revisions([_estimate(m, settings) for m in measured], settings)
    load_after = _load()
    return ABReport(sides=sides, settings=settings, options=options, measured=measured,
                    verdicts=verdicts, derived=tuple(derived_ratios(whole, verdicts, _ratios(controllers))),
                    not_compared=tuple(_unique(n for c in controllers for n in c.not_compared)),
                    notes=tuple(_unique([*notes, *(n for c in controllers for n in c.notes)])),
                    failure=None if failure is None else failure.record(),
                    benchmark_failures=tuple(f.record() for c in controllers for f in c.failures),
                    elapsed_s=time.monotonic() - started,
                    load={"before": load_before["average_1min"], "after": load_after["average_1min"],
                          "cpus": load_after["cpus"]})


def _work_first(sides, pytest_arguments: list[str], scratch: Path, progress: Callable[[str], None]) -> list[str]:
    """The two revisions' work fingerprints diffed (perfsuite.tools.ab.work), printed before any timing;
    the lines also go to the report's notes."""
    from perfsuite.tools.ab.work import fingerprint_diff

    lines = fingerprint_diff(sides, pytest_arguments, scratch, progress)
    for line in lines:
        print(line, flush=True)
    return lines


def _start_fork_server(options: Options, scratch: Path, progress: Callable[[str], None]):
    """The fork server, started importing its modules (ForkServer.launch); None where it cannot be."""
    progress(f"fork server: importing {', '.join(options.preload)}")
    return ForkServer.launch(options.preload, scratch / "fork-server.log")


def _fork_server(starting, options: Options, scratch: Path) -> tuple[ForkServer | None, list]:
    """The fork server every pass's workers come from, once it has imported its modules (None: fresh
    interpreters), and what it says."""
    if options.fresh_workers:
        return None, ["workers: a fresh interpreter each (--fresh-workers)"]
    if starting is None:
        return None, ["workers: a fresh interpreter each (forking workers needs Linux's child subreaper)"]
    server = starting.ready(timeout_s=options.setup_timeout_s)
    loaded = server.preloaded
    notes = [(f"workers: forked from a fork server that imported {len(loaded['seconds']) - len(loaded['failed'])} "
             f"module(s) once in {sum(loaded['seconds'].values()):.1f} s")]
    notes += [f"fork server: not preloaded {name}: {why}" for name, why in loaded["failed"].items()]
    return server, notes


def _ratios(controllers: list[Controller]) -> dict[str, tuple[str, str]]:
    """Every compare of named sides any pass ran: its sides' rows, as the first pass that ran it named
    them (a later pass runs only undecided tests, where a ratio may measure a side itself that a decided
    test's measurement gave it before)."""
    rows: dict[str, tuple[str, str]] = {}
    for controller in controllers:
        for name, sides in controller.ratios.items():
            rows.setdefault(name, sides)
    return rows


def _undecided(measured: list[Measured], settings) -> set[str]:
    """The tests (node ids) that need another pass: one of their measurements (``decided``: a ratio's
    sides) is not settled over its passes (perfsuite.verdict.ab.passes_settled; a test measuring several
    things runs them all again)."""
    from perfsuite.verdict.ab import passes_settled

    return {m.nodeid for m in measured
            if not passes_settled(m.passes(), settings, benchmarks=len(measured), cpu=m.cpu())}


def _estimate(measured: Measured, settings):
    """Over the passes where it ran in two or more, else over its rounds."""
    from perfsuite.verdict.ab import estimate, estimate_passes

    passes, cpu = measured.passes(), measured.cpu()
    return estimate_passes(passes, settings, cpu) if len(passes) > 1 else estimate(passes[0], settings, cpu[:1])


def _files_of(nodeids) -> list[str]:
    """The benchmark files holding ``nodeids``, in order: a later pass collects only what it runs (every
    other module's import and collection is seconds of every pass)."""
    return _unique(sorted(nodeid.split("::", 1)[0] for nodeid in nodeids))


def _unique(items) -> list:
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


