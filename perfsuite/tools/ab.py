"""``perfsuite ab BASE [HEAD]``: two revisions' benchmarks measured side by side on this machine, round by round.

A stored earlier run only shows changes larger than the machine's run-to-run noise (17-37 % between
two runs minutes apart on a 2-core VM). Here both revisions run in the same job: each side is checked
out into its own git worktree (HEAD defaults to the working tree itself) and runs pytest in its own
long-lived worker process (perfsuite.pytest_plugin.ab_worker; same interpreter and environment, the
side's tree first on the import path). The controller collects the same benchmarks on both sides,
then drives every measurement round: A's round, then B's, the order reversed every round, each
worker's warm-up and compile apart; the side not measuring is frozen (SIGSTOP), so it neither takes
CPU from the other's round nor works ahead between its own. Each round's figure comes back here. The
whole comparison runs in passes (ABSettings.passes), each with fresh workers on both sides, because
two processes of the same code can differ for their whole life (docs/ab.md); perfsuite.verdict.ab
decides over the passes. No process or worktree outlives the command.

Exit status: 0 no significant slowdown; 1 a significant slowdown beyond the minimum effect; 2 a usage
error (a bad revision, option or path); 3 a side could not be measured (it failed to start, crashed or
hung: the message names the side and the benchmark); 130 interrupted.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from perfsuite.errors import PerfsuiteError
from perfsuite.tools.options import check_outputs

EXIT_OK, EXIT_SLOWER, EXIT_USAGE, EXIT_SIDE_FAILED = 0, 1, 2, 3
WORKER_FILE = Path(__file__).resolve().parents[1] / "pytest_plugin" / "ab_worker.py"
BOOT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
SIDES = ("A", "B")
LOG_TAIL_LINES = 12


class ABError(PerfsuiteError, ValueError):
    """A revision, repository or option ``perfsuite ab`` cannot use."""


class SideFailure(PerfsuiteError, RuntimeError):
    """One side could not be measured: its worker failed to start, crashed or hung."""

    def __init__(self, side: str, problem: str, *, benchmark: str | None = None, log_tail: str = ""):
        self.side, self.problem, self.benchmark, self.log_tail = side, problem, benchmark, log_tail
        where = f" in {benchmark}" if benchmark else ""
        super().__init__(f"side {side}{where}: {problem}")

    def as_dict(self) -> dict:
        return {"side": self.side, "benchmark": self.benchmark, "problem": self.problem, "log_tail": self.log_tail}


# ------------------------------------------------------------------------------ revisions, worktrees


@dataclass(frozen=True)
class Side:
    """One side of the comparison: what the user named, the commit (None: the working tree) and the
    directory its worker runs in."""

    name: str  # "A" or "B"
    revision: str
    commit: str | None
    root: Path
    subject: str = ""

    def describe(self) -> str:
        if self.commit is None:
            return f"{self.name} = working tree of {self.root}"
        return f"{self.name} = {self.revision} ({self.commit[:10]} {self.subject})".rstrip()

    def as_dict(self) -> dict:
        return {**asdict(self), "root": str(self.root)}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def repository_root(directory: Path) -> Path:
    """The top of the git repository holding ``directory``."""
    result = _git(directory, "rev-parse", "--show-toplevel")
    if result.returncode != 0:
        raise ABError(f"--repo: expected a directory inside a git repository, found {directory} "
                      f"({result.stderr.strip() or 'git failed'})")
    return Path(result.stdout.strip())


def resolve(repo: Path, revision: str, *, what: str) -> tuple[str, str]:
    """The commit a revision names and its subject line."""
    result = _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if result.returncode != 0 or not result.stdout.strip():
        raise ABError(f"{what}: expected a git revision of {repo} (a commit, branch or tag), found {revision!r}")
    commit = result.stdout.strip()
    return commit, _git(repo, "log", "-1", "--format=%s", commit).stdout.strip()


@contextlib.contextmanager
def checkouts(repo: Path, base: str, head: str | None, scratch: Path) -> Iterator[tuple[Side, Side]]:
    """Side A at ``base`` and side B at ``head`` (None: the working tree), each revision in its own
    detached worktree under ``scratch``; the worktrees are removed on the way out, whatever happens."""
    resolved = {name: (revision, *resolve(repo, revision, what=name))
                for name, revision in (("BASE", base), ("HEAD", head)) if revision is not None}
    added: list[Path] = []
    try:
        sides = []
        for name, option in zip(SIDES, ("BASE", "HEAD")):
            if option not in resolved:
                sides.append(Side(name, "working tree", None, repo))
                continue
            revision, commit, subject = resolved[option]
            path = scratch / f"worktree-{name}"
            result = _git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
            if result.returncode != 0:
                raise ABError(f"{option}: could not check out {revision} into {path}: {result.stderr.strip()}")
            added.append(path)
            sides.append(Side(name, revision, commit, path, subject))
        yield sides[0], sides[1]
    finally:
        for path in added:
            _git(repo, "worktree", "remove", "--force", str(path))
        if added:
            _git(repo, "worktree", "prune")


# ------------------------------------------------------------------------------------------ workers


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class Worker:
    """One side's worker process (its own process group) and the pipes to it."""

    def __init__(self, side: Side, pytest_args: list[str], log_path: Path):
        self.side = side
        self.log_path = log_path
        events_read, events_write = os.pipe()
        commands_read, commands_write = os.pipe()
        env = dict(os.environ, PERFSUITE_AB_SIDE=side.name,
                   PYTHONPATH=os.pathsep.join(p for p in (str(side.root), os.environ.get("PYTHONPATH")) if p))
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", BOOT, str(WORKER_FILE), str(events_write), str(commands_read), *pytest_args],
                cwd=side.root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(events_write, commands_read), start_new_session=True)
        os.close(events_write)
        os.close(commands_read)
        self._events, self._commands = events_read, commands_write
        self._buffer = b""
        self.paused = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def failure(self, problem: str, *, benchmark: str | None = None) -> SideFailure:
        return SideFailure(self.side.name, problem, benchmark=benchmark, log_tail=_log_tail(self.log_path))

    def wait_frozen(self, *, timeout: float = 30.0, benchmark: str | None = None) -> None:
        """Wait until the worker has frozen itself, as it does after each ready and round event
        (ab_worker.Channel): while the other side measures, its background threads (tf.data refilling
        its prefetch buffers, say) neither take CPU from that round nor work ahead, so its next round
        starts where its last one ended, as back-to-back rounds do."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, os.WUNTRACED | os.WNOHANG)
            if pid and os.WIFSTOPPED(status):
                self.paused = True
                return
            if pid:  # it exited instead
                self.process.returncode = os.waitstatus_to_exitcode(status)
                raise self._exited("freezing after its round", benchmark)
            if time.monotonic() >= deadline:
                raise self.failure(f"did not freeze within {timeout:g} s after its round", benchmark=benchmark)
            time.sleep(0.0005)

    def resume(self) -> None:
        if self.paused:
            self._signal(signal.SIGCONT)
            self.paused = False

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def send(self, command: str, **fields) -> None:
        """A command to the worker, continued first if paused."""
        self.resume()
        try:
            os.write(self._commands, (json.dumps({"cmd": command, **fields}) + "\n").encode())
        except OSError:
            raise self._exited(f"sending {command!r}", fields.get("benchmark")) from None

    def receive(self, *, timeout: float, waiting_for: str, benchmark: str | None = None) -> dict:
        """The worker's next event; a SideFailure when it exits or says nothing within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.failure(f"no answer within {timeout:g} s while {waiting_for} (hung?)", benchmark=benchmark)
            readable, _, _ = select.select([self._events], [], [], remaining)
            if readable:
                chunk = os.read(self._events, 1 << 16)
                if not chunk:
                    raise self._exited(waiting_for, benchmark)
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        event = json.loads(line)
        if event.get("event") == "fatal":
            raise self.failure(f"the worker stopped while {waiting_for}: {event.get('message')}", benchmark=benchmark)
        return event

    def _exited(self, waiting_for: str, benchmark: str | None) -> SideFailure:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        status = self.process.returncode
        how = "is still running" if status is None else (
            f"was killed by signal {-status}" if status < 0 else f"exited with status {status}")
        return self.failure(f"the worker {how} while {waiting_for}", benchmark=benchmark)

    def close(self) -> None:
        """End the worker's whole process group (its own children too) and close the pipes."""
        self.resume()  # a stopped process acts on SIGTERM only once continued
        if self.process.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, sig)
                try:
                    self.process.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        with contextlib.suppress(ProcessLookupError, PermissionError):  # children left in the group
            os.killpg(self.process.pid, signal.SIGKILL)
        for fd in (self._events, self._commands):
            with contextlib.suppress(OSError):
                os.close(fd)


@contextlib.contextmanager
def workers(sides: tuple[Side, Side], pytest_args: list[str], scratch: Path,
            log_suffix: str = "") -> Iterator[dict[str, Worker]]:
    """A worker per side; every worker's process group is ended on the way out."""
    started: dict[str, Worker] = {}
    previous = signal.signal(signal.SIGTERM, _terminate)  # a cancelled CI job still cleans up
    try:
        for side in sides:
            started[side.name] = Worker(side, pytest_args, scratch / f"worker-{side.name}{log_suffix}.log")
        yield started
    finally:
        for worker in started.values():
            worker.close()
        signal.signal(signal.SIGTERM, previous)


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


# ----------------------------------------------------------------------------------------- driving


@dataclass(frozen=True)
class Options:
    """What the controller needs besides the decision settings."""

    budget_s: float = 600.0  # measuring time over all benchmarks (their rounds)
    round_timeout_s: float = 300.0
    setup_timeout_s: float = 1800.0  # collection, fixtures, warm-up, the rest of a test

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Measured:
    """One benchmark's rounds on both sides (the figure: samples/s, or a compare benchmark's ratio)."""

    name: str
    nodeid: str
    metric: str
    higher_is_better: bool
    a: tuple[float, ...]
    b: tuple[float, ...]
    order: tuple[str, ...]  # "AB" or "BA" per round
    a_round_s: tuple[float, ...]
    b_round_s: tuple[float, ...]
    elapsed_s: float
    pass_rounds: tuple[int, ...] = ()  # rounds of each pass, in order (the rounds above are joined)

    def as_dict(self) -> dict:
        keys = ("a", "b", "order", "a_round_s", "b_round_s", "pass_rounds")
        return {**asdict(self), **{k: list(getattr(self, k)) for k in keys}}

    def passes(self) -> list:
        """One perfsuite.verdict.ab.Paired per pass (the whole as one when it ran in one pass)."""
        from perfsuite.verdict.ab import Paired

        bounds = itertools.accumulate(self.pass_rounds or (len(self.a),), initial=0)
        return [Paired(self.name, self.a[lo:hi], self.b[lo:hi], self.higher_is_better)
                for lo, hi in itertools.pairwise(bounds)]


def joined(per_pass: list[list[Measured]]) -> list[Measured]:
    """One Measured per benchmark, its passes' rounds joined in pass order (first-seen order of names)."""
    groups: dict[str, list[Measured]] = {}
    for measured in per_pass:
        for m in measured:
            groups.setdefault(m.name, []).append(m)
    out = []
    for name, group in groups.items():
        first = group[0]
        out.append(Measured(name, first.nodeid, first.metric, first.higher_is_better,
                            *(tuple(v for m in group for v in getattr(m, key))
                              for key in ("a", "b", "order", "a_round_s", "b_round_s")),
                            sum(m.elapsed_s for m in group), tuple(len(m.a) for m in group)))
    return out


@dataclass(frozen=True)
class NotCompared:
    name: str
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Collected:
    """What the workers collected and said before the rounds."""

    common: list[str]
    only: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)


def display_name(nodeid: str, index: int = 0) -> str:
    name = nodeid.split("benchmarks/", 1)[-1]
    return name if index == 0 else f"{name} (measurement {index + 1})"


def _higher_is_better(metric: str) -> bool:
    from perfsuite.verdict import metrics

    try:
        return metrics.lookup(metric).better == metrics.HIGHER
    except PerfsuiteError:
        return True


class Controller:
    """Drives both workers benchmark by benchmark, in the same order, round by round."""

    def __init__(self, pool: dict[str, Worker], settings, options: Options, progress: Callable[[str], None],
                 *, only: set[str] | None = None):
        """only: the node ids to run (None: every benchmark both sides collected)."""
        self.pool, self.settings, self.options, self.progress = pool, settings, options, progress
        self.only = only
        self.scheduled: list[str] = []
        self.measured: list[Measured] = []
        self.not_compared: list[NotCompared] = []
        self.notes: list[str] = []
        self.spent_s = 0.0

    def run(self) -> None:
        collected = self.collect()
        self.notes += collected.notes
        for side, nodeids in collected.only.items():
            other = "B" if side == "A" else "A"
            self.not_compared += [NotCompared(display_name(n), f"only on side {side} (not collected on {other})")
                                  for n in nodeids]
        self.scheduled = [n for n in collected.common if self.only is None or n in self.only]
        for worker in self.pool.values():
            worker.send("run", items=self.scheduled)
        for position, nodeid in enumerate(self.scheduled):
            self.progress(f"[{position + 1}/{len(self.scheduled)}] {display_name(nodeid)}")
            self.benchmark(nodeid, remaining=len(self.scheduled) - position, count=len(self.scheduled))
        for worker in self.pool.values():
            self._until(worker, "finished", waiting_for="finishing the pytest session")

    def collect(self) -> Collected:
        items, notes = {}, []
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
                    break
                elif kind == "finished":
                    raise worker.failure(f"pytest stopped (exit status {event.get('exitstatus')}) before collecting "
                                         "any benchmark")
        in_b = set(items["B"])
        common = [n for n in items["A"] if n in in_b]
        only = {side: [n for n in items[side] if n not in set(common)] for side in SIDES}
        return Collected(common, {k: v for k, v in only.items() if v}, notes)

    def _started(self, worker: Worker, event: dict) -> list[str]:
        imported = Path(event.get("perfsuite", ""))
        notes = [f"side {worker.side.name}: rounds driven through the Recorder's round_driver"
                 if event.get("driver") == "seam" else
                 f"side {worker.side.name}: this revision predates the round_driver seam; its Recorder's "
                 "_rounds/_interleaved are wrapped instead"]
        if worker.side.root.resolve() not in imported.resolve().parents:
            notes.append(f"side {worker.side.name}: imports perfsuite from {imported}, not from its own tree "
                         f"{worker.side.root} (the revision has no perfsuite package of its own?)")
        return notes

    def _until(self, worker: Worker, kind: str, *, waiting_for: str) -> dict:
        while True:
            event = worker.receive(timeout=self.options.setup_timeout_s, waiting_for=waiting_for)
            if event.get("event") == kind:
                return event

    def benchmark(self, nodeid: str, *, remaining: int, count: int) -> None:
        """Every measurement of one benchmark: driven when both sides wait with the same one, skipped on
        the side that waits alone; the outcomes of both sides noted."""
        pending: dict[str, dict | None] = {s: None for s in SIDES}
        done: dict[str, dict | None] = {s: None for s in SIDES}
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
                    elif event.get("event") == "finished":
                        raise self.pool[side].failure("pytest finished before this benchmark ran", benchmark=name)
            a, b = pending["A"], pending["B"]
            if a is not None and b is not None:
                if a["index"] == b["index"]:
                    ended = self.drive(a, b, remaining=remaining, count=count)
                    done.update(ended)
                    compared, failed = compared or not ended, failed or bool(ended)
                else:
                    for side in SIDES:
                        self.pool[side].send("skip", reason="the sides' measurements of this benchmark differ")
                pending = {s: None for s in SIDES}
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
        elif bad:
            self.not_compared.append(NotCompared(name, "; ".join(
                f"side {s} {e['outcome']}: {e['message']}" for s, e in bad.items())))
        else:
            self.not_compared.append(NotCompared(name, "no controller-driven rounds (measure_dataset, "
                                                       "measure_step or compare with the budget's rounds)"))

    def drive(self, a_ready: dict, b_ready: dict, *, remaining: int, count: int) -> dict[str, dict]:
        """Rounds of one measurement, A B then B A and so on, until it is decided (at a look), its share
        of the budget is spent (after min_rounds), or max_rounds; then both sides are told to stop.
        A side whose benchmark fails during a round ends it there (returned: {side: its done event});
        the other side is told to skip it, and the benchmark is not compared."""
        from perfsuite.verdict.ab import Paired, estimate, settled

        nodeid, metric = a_ready["nodeid"], a_ready["metric"]
        name = display_name(nodeid, a_ready["index"])
        higher = _higher_is_better(metric)
        allotted = max(0.0, self.options.budget_s - self.spent_s) / max(remaining, 1)
        values = {s: [] for s in SIDES}
        seconds = {s: [] for s in SIDES}
        order, start = [], time.monotonic()
        while True:
            sides = SIDES if len(order) % 2 == 0 else SIDES[::-1]
            for side in sides:
                worker = self.pool[side]
                worker.send("go")
                event = worker.receive(timeout=self.options.round_timeout_s, benchmark=name,
                                       waiting_for=f"measuring round {len(order) + 1}")
                if event.get("event") == "done":  # the benchmark raised during its round
                    other = "B" if side == "A" else "A"
                    self.pool[other].send("skip", reason=f"side {side} failed during round {len(order) + 1}")
                    self.spent_s += time.monotonic() - start
                    self.not_compared.append(NotCompared(name, f"side {side} {event['outcome']} during round "
                                                               f"{len(order) + 1}: {event['message']}"))
                    return {side: event}
                if event.get("event") != "round":
                    raise worker.failure(f"expected round {len(order) + 1}'s figure, found {event}", benchmark=name)
                worker.wait_frozen(benchmark=name)
                values[side].append(event["value"])
                seconds[side].append(event["seconds"])
            order.append("".join(sides))
            n, elapsed = len(order), time.monotonic() - start
            paired = Paired(name, tuple(values["A"]), tuple(values["B"]), higher)
            if n >= self.settings.max_rounds or (n >= self.settings.min_rounds and n % 2 == 0 and (
                    settled(paired, self.settings, benchmarks=count) or elapsed >= allotted)):
                break
        for worker in self.pool.values():
            worker.send("stop")
        self.spent_s += time.monotonic() - start
        self.measured.append(Measured(name, nodeid, metric, higher, paired.a, paired.b, tuple(order),
                                      tuple(seconds["A"]), tuple(seconds["B"]), time.monotonic() - start))
        self.progress(f"    {n} rounds in {time.monotonic() - start:.1f} s, median change "
                      f"{estimate(paired, self.settings).change:+.1%}")
        return {}


# ----------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ABReport:
    """Everything one ``perfsuite ab`` run found: the sides, the settings, each benchmark's rounds and
    verdict, what was not compared, a side's failure, and the machine's load around the run."""

    sides: tuple[Side, Side]
    settings: object  # perfsuite.verdict.ab.ABSettings
    options: Options
    measured: tuple[Measured, ...]
    verdicts: tuple  # perfsuite.verdict.ab.ABVerdict, one per measured benchmark
    not_compared: tuple[NotCompared, ...]
    notes: tuple[str, ...]
    failure: SideFailure | None
    elapsed_s: float
    load: dict

    @property
    def exit_status(self) -> int:
        if any(v.significant_slowdown for v in self.verdicts):
            return EXIT_SLOWER
        return EXIT_SIDE_FAILED if self.failure is not None else EXIT_OK

    def title(self) -> str:
        a, b = self.sides
        return f"perfsuite ab: {a.describe()}  vs  {b.describe()}"

    def as_dict(self) -> dict:
        return {"sides": [s.as_dict() for s in self.sides], "settings": self.settings.as_dict(),
                "options": self.options.as_dict(),
                "benchmarks": [{**v.as_dict(), "rounds_detail": m.as_dict()} for m, v in zip(self.measured, self.verdicts)],
                "not_compared": [n.as_dict() for n in self.not_compared], "notes": list(self.notes),
                "failure": None if self.failure is None else self.failure.as_dict(),
                "elapsed_s": self.elapsed_s, "load": self.load, "exit_status": self.exit_status}


HEADER = ("benchmark", "change of B vs A [interval]", "p", "rounds", "verdict")


def rows(report: ABReport) -> list[tuple[str, ...]]:
    lines = []
    for verdict in report.verdicts:
        e = verdict.estimate
        change = f"{e.change:+.1%} [{e.low:+.1%}, {e.high:+.1%}]"
        verdict_text = verdict.label().upper() if verdict.significant_slowdown else verdict.label()
        rounds = str(e.rounds) if e.passes == 1 else f"{e.rounds} in {e.passes} passes"
        lines.append((verdict.name, change, f"{verdict.p:.2g}", rounds, verdict_text))
    return lines


def table(report: ABReport) -> list[str]:
    body = rows(report)
    widths = [max(len(row[i]) for row in [HEADER, *body]) for i in range(len(HEADER))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [HEADER, *body]]


def footnotes(report: ABReport) -> list[str]:
    s = report.settings
    if s.passes > 1:
        more = (f", up to {s.max_passes} for one still undecided (looks at {', '.join(map(str, s.pass_looks))})"
                if s.max_passes > s.passes else "")
        rule = (f"mean over the passes ({s.passes}{more}; fresh workers each) of each pass's median paired-round "
                f"change, Student-t interval at {s.confidence(s.passes):.1%}; p: two-sided t-test over the passes, "
                f"corrected for {len(s.pass_looks)} look(s), Holm")
    else:
        rule = (f"median of the paired rounds of one pass, interval at {s.interval_confidence:.1%}; p: one-sided "
                f"sign test, corrected for {s.look_count} looks and Holm")
    lines = [(f"change: B's figure against A's (samples/s, or a compare benchmark's ratio; worse is negative), "
              f"{rule} over {len(report.verdicts)} benchmark(s); slower/faster: p < {s.alpha:g} and beyond "
              f"max({s.min_effect:.0%}, {s.noise_multiple:g} SE); no change: interval within "
              f"±{s.no_change_within:.0%}")]
    lines += [f"not compared: {n.name}: {n.reason}" for n in report.not_compared]
    lines += list(report.notes)
    if report.failure is not None:
        lines.append(f"FAILED: {report.failure}")
    lines.append(f"took {report.elapsed_s:.0f} s; load average {report.load.get('before')} before, "
                 f"{report.load.get('after')} after, {report.load.get('cpus')} CPU(s)")
    return lines


def markdown(report: ABReport) -> str:
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    text = [f"### {report.title()}", "", line(HEADER), line(["---"] * len(HEADER)), *map(line, rows(report)), ""]
    text += [f"- {note}" for note in footnotes(report)]
    if report.failure is not None and report.failure.log_tail:
        text += ["", f"Last lines of side {report.failure.side}'s log:", "", "```",
                 report.failure.log_tail, "```"]
    return "\n".join(text) + "\n"


def write_json(path: Path, data: dict) -> None:
    """data as JSON at path, written to a temporary file and renamed over it (never half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, allow_nan=False)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


PLOTS_PER_PAGE = 12


def plot(report: ABReport, directory: Path) -> list[Path]:
    """Per benchmark, each round's change of B against A (A-first and B-first rounds marked apart), the
    median change, its interval and the minimum effect; PLOTS_PER_PAGE benchmarks to a PNG."""
    from perfsuite.plotting import pyplot, save

    plt = pyplot()
    pairs = list(zip(report.measured, report.verdicts))
    paths = []
    for page in range(0, len(pairs), PLOTS_PER_PAGE):
        chunk = pairs[page:page + PLOTS_PER_PAGE]
        columns = min(3, len(chunk))
        lines = math.ceil(len(chunk) / columns)
        figure, axes = plt.subplots(lines, columns, figsize=(5 * columns, 3 * lines), squeeze=False)
        for ax, (measured, verdict) in zip(axes.flat, chunk):
            _plot_one(ax, measured, verdict)
        for ax in list(axes.flat)[len(chunk):]:
            ax.axis("off")
        paths.append(save(plt, figure, directory / f"ab-rounds-{page // PLOTS_PER_PAGE + 1}.png"))
    return paths


def _plot_one(ax, measured: Measured, verdict) -> None:
    from perfsuite.verdict.ab import Paired

    e = verdict.estimate
    changes = [math.expm1(v) * 100 for v in Paired(measured.name, measured.a, measured.b,
                                                     measured.higher_is_better).log_changes()]
    for kind, marker in (("AB", "o"), ("BA", "s")):
        points = [(i + 1, c) for i, (c, o) in enumerate(zip(changes, measured.order)) if o == kind]
        if points:
            ax.plot(*zip(*points), marker, markersize=4, linestyle="none", label=f"{kind[0]} first")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.axhspan(-e.min_effect * 100, e.min_effect * 100, color="grey", alpha=0.15, label="min effect")
    ax.axhspan(e.low * 100, e.high * 100, color="tab:orange", alpha=0.25, label="interval")
    ax.axhline(e.change * 100, color="tab:orange", linewidth=1.2)
    ax.set_title(f"{measured.name[:60]}\n{verdict.label()} ({e.change:+.1%})", fontsize=8)
    ax.set_xlabel("round")
    ax.set_ylabel(f"B vs A, % ({measured.metric})", fontsize=8)
    ax.legend(fontsize=6, loc="best")


# --------------------------------------------------------------------------------------------- run


def pytest_args(args) -> list[str]:
    """The worker's pytest command line: the benchmarks, the selection and the profile passed through;
    pytest-benchmark's own timing off (the rounds are the controller's), gates reported only, the
    session's order kept, nothing cached in the trees."""
    command = [args.benchmarks, f"--perfsuite-profile={args.profile}", "--perfsuite-gates=report",
               "--benchmark-disable", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--continue-on-collection-errors", "-q"]
    if args.keyword:
        command += ["-k", args.keyword]
    if args.markexpr:
        command += ["-m", args.markexpr]
    if args.data_dir is not None:
        command += [f"--perfsuite-data-dir={args.data_dir.resolve()}"]
    return command


def _load() -> dict:
    with contextlib.suppress(OSError):
        return {"average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    return {"average_1min": None, "cpus": os.cpu_count()}


def compare_revisions(*, repo: Path, base: str, head: str | None, pytest_arguments: list[str], settings,
                      options: Options, progress: Callable[[str], None], logs_to: Path | None = None) -> ABReport:
    """Check both revisions out; per pass, run fresh workers on both and drive every round; decide (see
    the module notes). Every benchmark gets settings.passes passes, one still undecided at a pass look
    gets more (up to settings.max_passes), each pass the same share of the budget per benchmark; a side
    failure ends the passes."""
    from perfsuite.verdict.ab import decide

    started, load_before = time.monotonic(), _load()
    scratch = Path(tempfile.mkdtemp(prefix="perfsuite-ab-"))
    failure, controllers, only = None, [], None
    per_benchmark_s = None  # a pass's share of the budget per benchmark, known once the first pass collected
    try:
        with checkouts(repo, base, head, scratch) as sides:
            for side in sides:
                progress(side.describe())
                if not (side.root / pytest_arguments[0]).exists():
                    raise ABError(f"side {side.name}: expected benchmarks at {pytest_arguments[0]}, found nothing "
                                  f"there in {side.revision}")
            for index in range(settings.max_passes):
                suffix = f"-pass{index + 1}" if settings.passes > 1 else ""
                if settings.passes > 1:
                    progress(f"pass {index + 1}: fresh workers on both sides" + (
                        f", {len(only)} undecided benchmark(s)" if only is not None else ""))
                share = replace(options, budget_s=options.budget_s / settings.passes if per_benchmark_s is None
                                else per_benchmark_s * len(only))
                with workers(sides, pytest_arguments, scratch, suffix) as pool:
                    controllers.append(Controller(pool, settings, share, progress, only=only))
                    try:
                        controllers[-1].run()
                    except SideFailure as error:
                        failure = error
                if failure is not None:
                    break
                if per_benchmark_s is None:
                    per_benchmark_s = options.budget_s / settings.passes / max(len(controllers[0].scheduled), 1)
                only = _undecided(joined([c.measured for c in controllers]), settings)
                if not only:
                    break
    finally:
        if logs_to is not None:
            logs_to.mkdir(parents=True, exist_ok=True)
            for log in scratch.glob("worker-*.log"):
                shutil.copy(log, logs_to / log.name)
        shutil.rmtree(scratch, ignore_errors=True)
    measured = tuple(joined([c.measured for c in controllers]))
    load_after = _load()
    return ABReport(sides=sides, settings=settings, options=options, measured=measured,
                    verdicts=decide([_estimate(m, settings) for m in measured], settings),
                    not_compared=tuple(_unique(n for c in controllers for n in c.not_compared)),
                    notes=tuple(_unique(n for c in controllers for n in c.notes)), failure=failure,
                    elapsed_s=time.monotonic() - started,
                    load={"before": load_before["average_1min"], "after": load_after["average_1min"],
                          "cpus": load_after["cpus"]})


def _undecided(measured: list[Measured], settings) -> set[str]:
    """The tests (node ids) that need another pass: one of their measurements is not settled over its
    passes (perfsuite.verdict.ab.passes_settled; a test measuring several things runs them all again)."""
    from perfsuite.verdict.ab import passes_settled

    return {m.nodeid for m in measured if not passes_settled(m.passes(), settings, benchmarks=len(measured))}


def _estimate(measured: Measured, settings):
    """Over the passes where it ran in two or more, else over its rounds."""
    from perfsuite.verdict.ab import estimate, estimate_passes

    passes = measured.passes()
    return estimate_passes(passes, settings) if len(passes) > 1 else estimate(passes[0], settings)


def _unique(items) -> list:
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


# --------------------------------------------------------------------------------------------- CLI


def _fraction(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, found {text!r}")
    return value


def _positive(kind):
    import argparse

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, found {text!r}")
        return value

    return parse


def add_arguments(parser) -> None:
    """The ``perfsuite ab`` options (cli.py's _add_ab registers the command)."""
    from perfsuite.pytest_plugin.profiles import PROFILES
    from perfsuite.verdict.ab import ABSettings

    parser.add_argument("base", metavar="BASE", help="git revision of side A (e.g. HEAD~1, origin/main, a merge base)")
    parser.add_argument("head", metavar="HEAD", nargs="?", default=None,
                        help="git revision of side B (default: the working tree, uncommitted changes included)")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k selection, on both sides")
    parser.add_argument("-m", dest="markexpr", metavar="EXPR", help="pytest -m selection, on both sides")
    parser.add_argument("--benchmarks", default="benchmarks", metavar="PATH",
                        help="benchmark path inside each revision (default: %(default)s)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick",
                        help="run profile of both sides: corpus and round length (default: %(default)s)")
    parser.add_argument("--budget", type=_positive(float), default=600.0, metavar="SECONDS",
                        help="measuring time over all benchmarks; each gets its share (at least --min-rounds), "
                             "and stops early once decided (default: %(default)g)")
    parser.add_argument("--alpha", type=_fraction, default=0.01, metavar="P",
                        help="false-alarm rate over all benchmarks compared (default: %(default)g)")
    parser.add_argument("--min-effect", type=_fraction, default=0.02, metavar="FRACTION",
                        help="least change that counts; it grows with the noise to 3 standard errors "
                             "(default: %(default)g)")
    parser.add_argument("--no-change-within", type=_fraction, default=0.05, metavar="FRACTION",
                        help="'no change' when the change's interval lies within ± this (default: %(default)g)")
    parser.add_argument("--min-rounds", type=_positive(int), default=12, metavar="N",
                        help="rounds per benchmark at least, even (default: %(default)s)")
    parser.add_argument("--max-rounds", type=_positive(int), default=96, metavar="N",
                        help="rounds per benchmark at most, even (default: %(default)s)")
    parser.add_argument("--passes", type=_positive(int), default=ABSettings().passes, metavar="N",
                        help="times the comparison runs with fresh workers on both sides; with 2 or more the pass "
                             "is the unit of the decision (a difference between two processes of the same code "
                             "is no change of the code); 1 is quicker but trusts one pair of processes "
                             "(default: %(default)s)")
    parser.add_argument("--max-passes", type=_positive(int), metavar="N",
                        help="passes at most for a benchmark still undecided after --passes (looked at every "
                             "doubling; each costs what one of the first passes did for it; equal to --passes "
                             f"to keep within the budget) (default: {ABSettings().max_passes}, or --passes if more)")
    parser.add_argument("--round-timeout", type=_positive(float), default=300.0, metavar="SECONDS",
                        help="a round taking longer is a hung side (default: %(default)g)")
    parser.add_argument("--setup-timeout", type=_positive(float), default=1800.0, metavar="SECONDS",
                        help="the longest a side may take outside its rounds between two steps: start-up, "
                             "collection, fixtures, warm-up (default: %(default)g)")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="where both sides build and reuse corpora")
    parser.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                        help="the git repository (default: the one holding the current directory)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every round and verdict as JSON to FILE")
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="write summary.md, per-round plots and both workers' logs to DIR (needs matplotlib)")


def run(args, parser) -> int:
    """``perfsuite ab``: options checked first, then the comparison, the table and the files."""
    from perfsuite.verdict.ab import ABSettings

    check_outputs(parser, json_file=args.json, directories={"--report": args.report, "--data-dir": args.data_dir})
    try:
        settings = ABSettings(alpha=args.alpha, min_effect=args.min_effect, no_change_within=args.no_change_within,
                              min_rounds=args.min_rounds, max_rounds=args.max_rounds, passes=args.passes,
                              max_passes=args.max_passes or max(ABSettings().max_passes, args.passes))
    except ValueError as error:  # "min_rounds: expected ..." said of the option that set it
        name, _, problem = str(error).partition(": ")
        parser.error(f"--{name.replace('_', '-')}: {problem}")
    options = Options(budget_s=args.budget, round_timeout_s=args.round_timeout, setup_timeout_s=args.setup_timeout)
    start = time.monotonic()

    def progress(message: str) -> None:
        print(f"perfsuite ab [{time.monotonic() - start:5.0f} s] {message}", file=sys.stderr, flush=True)

    report = compare_revisions(repo=repository_root(args.repo), base=args.base, head=args.head,
                               pytest_arguments=pytest_args(args), settings=settings, options=options,
                               progress=progress, logs_to=args.report)
    print(report.title())
    for line in table(report):
        print(line)
    for line in footnotes(report):
        print(f"note: {line}")
    if report.failure is not None and report.failure.log_tail:
        print(f"last lines of side {report.failure.side}'s log:\n{report.failure.log_tail}", file=sys.stderr)
    _write_outputs(report, args)
    return report.exit_status


def _write_outputs(report: ABReport, args) -> None:
    if args.json is not None:
        write_json(args.json, report.as_dict())
        print(f"json: {args.json}")
    if args.report is not None:
        args.report.mkdir(parents=True, exist_ok=True)
        (args.report / "summary.md").write_text(markdown(report), encoding="utf-8")
        for path in plot(report, args.report):
            print(f"plot: {path}")
        print(f"report: {args.report / 'summary.md'}")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as stream:
            stream.write(markdown(report))
