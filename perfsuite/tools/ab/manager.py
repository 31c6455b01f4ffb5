"""Worktrees and worker processes of ``perfsuite ab`` (pyperf's ``_manager``): each side's revision
checked out into its own detached git worktree, and one long-lived worker process per side (its own
process group, pipes to the controller, frozen between its rounds), forked from the fork server
(forkserver.py) or started as a fresh interpreter. Nothing here decides anything."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from perfsuite.errors import PerfsuiteError
from perfsuite.records import Record

WORKER_FILE = Path(__file__).resolve().parents[2] / "pytest_plugin" / "ab_worker.py"
FORK_SERVER_FILE = Path(__file__).resolve().with_name("forkserver.py")
# Imported once by the fork server instead of by every worker of every pass: what the suite's benchmarks
# import that takes seconds (TensorFlow; librosa's filters, spectrum and utils with scipy.signal; figures
# in docs/ab.md, "The fork server"). Not pytest plugins: pytest cannot rewrite the asserts of a plugin module
# already imported (hypothesis's), and warns. Modules not installed are noted, not needed.
PRELOAD = ("tensorflow", "numpy", "scipy.signal", "pytest", "librosa.filters", "librosa.core.spectrum",
           "librosa.util.utils", "soundfile")
PR_SET_CHILD_SUBREAPER = 36
BOOT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
SIDES = ("A", "B")
LOG_TAIL_LINES = 12


class ABError(PerfsuiteError, ValueError):
    """A revision, repository or option ``perfsuite ab`` cannot use."""


ROLES = {"A": "base", "B": "head"}


class SideFailure(PerfsuiteError, RuntimeError):
    """One side could not be measured: its worker failed to start, crashed or hung, or one benchmark
    raised there. log: the worker log's file name (copied to --report DIR), log_tail: its last lines."""

    def __init__(self, side: str, problem: str, *, benchmark: str | None = None, log_tail: str = "",
                 log: str = ""):
        self.side, self.problem, self.benchmark, self.log_tail, self.log = side, problem, benchmark, log_tail, log
        super().__init__(str(self.record()))

    def record(self) -> Failure:
        """The failure as it is reported and written to the JSON."""
        return Failure(self.side, self.problem, self.benchmark, self.log, self.log_tail)


@dataclass(frozen=True)
class Failure(Record):
    """A SideFailure as reported: side, problem, benchmark (None: the whole side), log, log_tail; role
    (base or head) derived from the side."""

    DERIVED: ClassVar[tuple[str, ...]] = ("role",)
    side: str
    problem: str
    benchmark: str | None = None
    log: str = ""
    log_tail: str = ""

    @property
    def role(self) -> str:
        """base (side A) or head (side B)."""
        return ROLES.get(self.side, self.side)

    def __str__(self) -> str:
        where = f" in {self.benchmark}" if self.benchmark else ""
        return f"side {self.side}{where}: {self.problem}"


# ------------------------------------------------------------------------------ revisions, worktrees


@dataclass(frozen=True)
class Side(Record):
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


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _subreaper(on: bool) -> bool:
    """Make this process adopt its orphaned descendants (Linux), as the fork server's workers are."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on)) == 0
    except (OSError, AttributeError):
        return False


class ForkServer:
    """The fork server process (forkserver.py): preloads ``modules`` once, then forks each worker,
    which this process adopts. Started by ``start`` (None where it cannot be: not Linux)."""

    def __init__(self, process: subprocess.Popen, control: socket.socket, log_path: Path, preloaded: dict):
        self.process, self.control, self.log_path, self.preloaded = process, control, log_path, preloaded

    @classmethod
    def start(cls, modules: tuple[str, ...], log_path: Path, *, timeout_s: float) -> ForkServer | None:
        launched = cls.launch(modules, log_path)
        return None if launched is None else launched.ready(timeout_s=timeout_s)

    @classmethod
    def launch(cls, modules: tuple[str, ...], log_path: Path) -> ForkServer | None:
        """The server started, importing its modules while the caller goes on (``ready`` waits for it);
        None where it cannot be (not Linux)."""
        if not hasattr(socket, "send_fds") or not _subreaper(True):
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", BOOT, str(FORK_SERVER_FILE), str(theirs.fileno()), *modules],
                cwd=log_path.parent, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        return cls(process, ours, log_path, {})

    def ready(self, *, timeout_s: float) -> ForkServer:
        """This server once its modules are imported; SideFailure if it died, ABError if a preloaded module
        imported perfsuite."""
        try:
            self.preloaded = self._reply("preloaded", "preloading its modules", timeout_s=timeout_s)
        except SideFailure:
            self.close()
            raise
        if self.preloaded["leaked"]:
            self.close()
            raise ABError(f"the fork server's preloaded modules imported {', '.join(self.preloaded['leaked'])}; "
                          "a worker must import its own side's: leave them out of the preload list")
        return self

    def fork(self, request: dict, fds: list[int], *, timeout_s: float) -> int:
        """A worker forked with ``request`` (root, env, script, args) and its three descriptors; its pid."""
        try:
            socket.send_fds(self.control, [json.dumps(request).encode()], fds)
        except OSError as error:
            raise self._failed(f"taking a request ({error})") from None
        pid = self._reply("forked", "forking a worker", timeout_s=timeout_s)["pid"]
        if pid <= 0:
            raise self._failed("forking a worker")
        return pid

    def _reply(self, kind: str, doing: str, *, timeout_s: float) -> dict:
        """The server's answer (event ``kind``) to what it is ``doing``."""
        readable, _, _ = select.select([self.control], [], [], timeout_s)
        message = self.control.recv(1 << 20) if readable else b""
        if not message:
            raise self._failed(doing + ("" if readable else f" (no answer within {timeout_s:g} s)"))
        event = json.loads(message)
        if event.get("event") != kind:
            raise self._failed(f"{doing}: expected its {kind!r} answer, found {event}")
        return event

    def _failed(self, doing: str) -> SideFailure:
        return SideFailure("A and B", f"the fork server failed while {doing}", log_tail=log_tail(self.log_path),
                           log=self.log_path.name)

    def close(self) -> None:
        self.control.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        _subreaper(False)


class Adopted:
    """A worker the fork server forked and this process adopted: Popen's pid, poll, wait and returncode."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode


class Worker:
    """One side's worker process (its own process group) and the pipes to it: forked by ``server``,
    or a fresh interpreter where there is none."""

    def __init__(self, side: Side, pytest_args: list[str], log_path: Path, server: ForkServer | None = None,
                 *, timeout_s: float = 60.0):
        self.side = side
        self.log_path = log_path
        events_read, events_write = os.pipe()
        commands_read, commands_write = os.pipe()
        env = dict(os.environ, PERFSUITE_AB_SIDE=side.name,
                   PYTHONPATH=os.pathsep.join(p for p in (str(side.root), os.environ.get("PYTHONPATH")) if p))
        with open(log_path, "wb") as log:
            if server is not None:
                request = {"root": str(side.root), "env": env, "script": str(WORKER_FILE), "args": pytest_args}
                try:
                    pid = server.fork(request, [events_write, commands_read, log.fileno()], timeout_s=timeout_s)
                except SideFailure:
                    for fd in (events_read, events_write, commands_read, commands_write):
                        os.close(fd)
                    raise
                self.process = Adopted(pid)
            else:
                self.process = subprocess.Popen(
                    [sys.executable, "-c", BOOT, str(WORKER_FILE), str(events_write), str(commands_read),
                     *pytest_args], cwd=side.root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, pass_fds=(events_write, commands_read), start_new_session=True)
        os.close(events_write)
        os.close(commands_read)
        self._events, self._commands = events_read, commands_write
        self._buffer = b""
        self.paused = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def failure(self, problem: str, *, benchmark: str | None = None) -> SideFailure:
        return SideFailure(self.side.name, problem, benchmark=benchmark, log_tail=log_tail(self.log_path),
                           log=self.log_path.name)

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
def workers(sides: tuple[Side, Side], pytest_args: list[str], scratch: Path, log_suffix: str = "",
            server: ForkServer | None = None) -> Iterator[dict[str, Worker]]:
    """A worker per side (forked by ``server`` where given); every worker's process group is ended on
    the way out."""
    started: dict[str, Worker] = {}
    previous = signal.signal(signal.SIGTERM, _terminate)  # a cancelled CI job still cleans up
    try:
        for side in sides:
            started[side.name] = Worker(side, pytest_args, scratch / f"worker-{side.name}{log_suffix}.log", server)
        yield started
    finally:
        for worker in started.values():
            worker.close()
        signal.signal(signal.SIGTERM, previous)


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


