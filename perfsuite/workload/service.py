"""tf.data service: a dispatcher and N workers as separate OS processes, and loaders served through it.

``ServiceCluster`` starts ``python -m perfsuite.workload.service dispatcher|worker`` on localhost (each
in its own process group, logs under its work directory, always stopped and reaped; servers exit when
their owner dies) or, with ``ServiceCluster.existing(address)``, uses a running deployment.
``distribute`` serves a loader through it and refuses Python-function pipelines up front (their
function exists only in the building process). TensorFlow never ends a read whose worker died, so
``with_deadline`` bounds each batch and raises ServiceError naming the dead workers. The fault
behaviour, measured per processing mode, and multi-host deployment notes are in docs/service.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from perfsuite._tensorflow import tensorflow
from perfsuite.errors import ServiceError
from perfsuite.files import write_atomic
from perfsuite.records import Record
from perfsuite.workload.pipeline_model import read_pipeline

PROCESSING_MODES = ("parallel_epochs", "distributed_epoch")
# Ops that call back into the Python interpreter that built the graph.
MODULE = "perfsuite.workload.service"
ROLES = ("dispatcher", "worker")
# The dispatcher drops a worker whose heartbeat is this late (TF's default is much longer), and
# collects a job nobody reads after JOB_GC_TIMEOUT_MS, so abandoned benchmark jobs stop using CPU.
WORKER_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 500
JOB_GC_CHECK_INTERVAL_MS = 1000
JOB_GC_TIMEOUT_MS = 5000
DEFAULT_BATCH_TIMEOUT_S = 60.0
LOG_TAIL_LINES = 30




@dataclass(frozen=True)
class ServerProcess(Record):
    role: str  # "dispatcher", "worker-0", ...
    pid: int
    port: int
    log_path: Path
    exit_code: int | None  # None while it runs; negative: killed by that signal

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def describe(self) -> str:
        state = "running" if self.exit_code is None else f"exited with code {self.exit_code}"
        return f"{self.role} (pid {self.pid}, port {self.port}) {state}"


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def _host_port(address: str) -> tuple[str, int]:
    """("host", port) of "grpc://host:port" or "host:port"."""
    bare = address.split("://", 1)[-1]
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ServiceError(f"dispatcher address: expected 'grpc://host:port' or 'host:port', "
                           f"found {address!r}")
    return host, int(port)


def _accepts_connections(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log written)"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log empty)"


def running_service_pids(*, owner_pid: int | None = None) -> tuple[int, ...]:
    """PIDs of live ``perfsuite.workload.service`` server processes (all, or those started by owner_pid).

    Read from /proc (Linux), so it needs no extra package. Zombies (exited, not yet reaped) have
    an empty command line and are not listed.
    """
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = [arg.decode(errors="replace") for arg in (entry / "cmdline").read_bytes().split(b"\0")]
        except OSError:  # it ended while we looked
            continue
        if MODULE not in args or not set(ROLES) & set(args):
            continue
        if owner_pid is not None and not _has_option(args, "--owner-pid", str(owner_pid)):
            continue
        pids.append(int(entry.name))
    return tuple(sorted(pids))


def _has_option(args: list[str], name: str, value: str) -> bool:
    return any(args[i] == name and args[i + 1] == value for i in range(len(args) - 1))


class _Child:
    """One server process: its Popen, role, port, log and ready file."""

    def __init__(self, *, role: str, argv: list[str], port: int, work_dir: Path, env: dict):
        self.role = role
        self.port = port
        self.argv = argv
        self.log_path = work_dir / f"{role}.log"
        self.ready_path = work_dir / f"{role}.ready"
        self.ready_path.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:  # a restarted server appends to its log
            # start_new_session: its own process group, so stopping it reaches anything it spawned.
            self.popen = subprocess.Popen([*argv, "--ready-file", str(self.ready_path)], stdout=log,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True)

    def exit_code(self) -> int | None:
        """The exit code once it has exited (negative: the signal), else None; does not reap it."""
        if self.popen.returncode is not None:
            return self.popen.returncode
        # WNOWAIT leaves the zombie in place: while it exists its PID and process group stay ours,
        # so signalling the group later cannot hit a stranger that reused the number.
        status = os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if status is None:
            return None
        return status.si_status if status.si_code == os.CLD_EXITED else -status.si_status

    def info(self) -> ServerProcess:
        return ServerProcess(role=self.role, pid=self.popen.pid, port=self.port, log_path=self.log_path,
                             exit_code=self.exit_code())

    def is_ready(self) -> bool:
        return self.ready_path.exists() and _accepts_connections("localhost", self.port)

    def failure(self, what: str) -> ServiceError:
        return ServiceError(f"tf.data service {self.role} (pid {self.popen.pid}, port {self.port}): {what}. "
                            f"Log {self.log_path}, last lines:\n{_log_tail(self.log_path)}")

    def signal_group(self, signum: int) -> None:
        if self.popen.returncode is not None:
            return  # reaped: the number may belong to someone else now
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)

    def reap(self) -> int:
        """SIGKILL whatever is left of its group, then collect its exit status."""
        self.signal_group(signal.SIGKILL)
        return self.popen.wait()


class ServiceCluster:
    """A tf.data service dispatcher and ``workers`` worker processes on localhost (a context manager).

    ``ServiceCluster.existing(address)`` uses a running cluster instead and starts nothing.
    """

    def __init__(self, *, workers: int = 1, work_dir: Path | None = None, start_timeout_s: float = 60.0,
                 stop_timeout_s: float = 10.0, dispatcher_port: int | None = None,
                 worker_timeout_ms: int = WORKER_TIMEOUT_MS,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS,
                 extra_args: dict[str, list[str]] | None = None):
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers: expected an integer >= 1, found {workers!r}")
        if start_timeout_s <= 0 or stop_timeout_s <= 0:
            raise ValueError("start_timeout_s/stop_timeout_s: expected > 0, "
                             f"found {start_timeout_s}/{stop_timeout_s}")
        unknown = set(extra_args or {}) - set(ROLES)
        if unknown:
            raise ValueError(f"extra_args: expected keys among {ROLES}, found {sorted(unknown)}")
        self.workers: int | None = workers
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._work_dir_arg = Path(work_dir) if work_dir is not None else None
        self._dispatcher_port = dispatcher_port
        self._worker_timeout_ms = worker_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._extra_args = extra_args or {}  # extra command-line arguments per role (a test seam)
        self._managed = True
        self._address: str | None = None
        self._children: list[_Child] = []
        self._work_dir: Path | None = None
        self._own_work_dir = False

    @classmethod
    def existing(cls, address: str, *, connect_timeout_s: float = 10.0) -> ServiceCluster:
        """A cluster someone else runs, at ``grpc://host:port``; starting it checks the dispatcher answers."""
        host, port = _host_port(address)
        cluster = cls(start_timeout_s=connect_timeout_s)
        cluster._managed = False
        cluster.workers = None  # unknown: the dispatcher's business
        cluster._address = f"grpc://{host}:{port}"
        return cluster

    # ------------------------------------------------------------------------------------ state

    @property
    def managed(self) -> bool:
        """True when this object starts and stops the processes (False for an existing cluster)."""
        return self._managed

    @property
    def address(self) -> str:
        """The dispatcher's address for tf.data.experimental.service.distribute: ``grpc://host:port``."""
        if self._address is None:
            raise ServiceError("ServiceCluster.address: expected a started cluster (use it as a context "
                               "manager or call start()), found one not started")
        return self._address

    @property
    def processes(self) -> tuple[ServerProcess, ...]:
        """The dispatcher and workers this object started, with their state (none for an existing cluster)."""
        return tuple(child.info() for child in self._children)

    @property
    def work_dir(self) -> Path | None:
        return self._work_dir

    def worker_processes(self) -> tuple[ServerProcess, ...]:
        return tuple(child.info() for child in self._workers())

    def exited(self) -> tuple[ServerProcess, ...]:
        """The started processes that are no longer running."""
        return tuple(process for process in self.processes if process.exit_code is not None)

    def describe(self) -> str:
        if not self._managed:
            return f"existing cluster at {self._address} (its processes are not perfsuite's to see)"
        return "; ".join(process.describe() for process in self.processes) or "no processes"

    def _workers(self) -> list[_Child]:
        return [child for child in self._children if child.role != "dispatcher"]

    # -------------------------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        if not self._managed:
            self._check_reachable()
            return
        if self._children:
            raise ServiceError("ServiceCluster.start: expected a stopped cluster, found one already started")
        self._prepare_work_dir()
        try:
            self._spawn()
            self._await_ready(self._children)
        except BaseException:
            self.stop()
            raise

    def _check_reachable(self) -> None:
        host, port = _host_port(self._address)
        deadline = time.monotonic() + self.start_timeout_s
        while not _accepts_connections(host, port):
            if time.monotonic() > deadline:
                raise ServiceError(f"existing tf.data service dispatcher {self._address}: expected it to "
                                   f"accept connections, found none within {self.start_timeout_s:g} s")
            time.sleep(0.2)

    def _prepare_work_dir(self) -> None:
        if self._work_dir_arg is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="perfsuite-service-"))
            self._own_work_dir = True
        else:
            self._work_dir = self._work_dir_arg
            self._work_dir.mkdir(parents=True, exist_ok=True)

    def _env(self) -> dict:
        # INFO logs: a server's log is ours to read. No GPUs: see the module docstring.
        return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", CUDA_VISIBLE_DEVICES="-1")

    def _spawn(self) -> None:
        dispatcher_port = self._dispatcher_port or free_port()
        self._address = f"grpc://localhost:{dispatcher_port}"
        argv = [sys.executable, "-m", MODULE, "dispatcher", "--port", str(dispatcher_port),
                "--work-dir", str(self._work_dir / "dispatcher-state"),
                "--worker-timeout-ms", str(self._worker_timeout_ms),
                "--job-gc-check-interval-ms", str(JOB_GC_CHECK_INTERVAL_MS),
                "--job-gc-timeout-ms", str(JOB_GC_TIMEOUT_MS), "--owner-pid", str(os.getpid())]
        self._children.append(_Child(role="dispatcher", port=dispatcher_port, work_dir=self._work_dir,
                                     env=self._env(), argv=argv + self._extra_args.get("dispatcher", [])))
        # Workers start at the same time: each retries registering until the dispatcher is up, so
        # the TensorFlow imports (seconds each) overlap.
        for index in range(self.workers):
            self._children.append(self._spawn_worker(role=f"worker-{index}", port=free_port()))

    def _spawn_worker(self, *, role: str, port: int) -> _Child:
        _, dispatcher_port = _host_port(self._address)
        argv = [sys.executable, "-m", MODULE, "worker", "--dispatcher", f"localhost:{dispatcher_port}",
                "--port", str(port), "--heartbeat-interval-ms", str(self._heartbeat_interval_ms),
                "--owner-pid", str(os.getpid())]
        return _Child(role=role, port=port, work_dir=self._work_dir, env=self._env(),
                      argv=argv + self._extra_args.get("worker", []))

    def _await_ready(self, children: list[_Child]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        waiting = list(children)
        while waiting:
            for child in list(waiting):
                code = child.exit_code()
                if code is not None:
                    raise child.failure(f"exited with code {code} before it was ready")
                if child.is_ready():
                    waiting.remove(child)
            if waiting and time.monotonic() > deadline:
                raise waiting[0].failure(f"expected it ready within {self.start_timeout_s:g} s, found it "
                                         "still starting")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM every process group, SIGKILL what is left after stop_timeout_s, reap every child."""
        children, self._children = self._children, []
        for child in children:
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while any(child.exit_code() is None for child in children) and time.monotonic() < deadline:
            time.sleep(0.02)
        for child in children:
            child.reap()
        if self._own_work_dir and self._work_dir is not None:
            shutil.rmtree(self._work_dir)
            self._own_work_dir = False

    # ----------------------------------------------------------------------------------- faults

    def kill_worker(self, index: int = 0) -> ServerProcess:
        """SIGKILL worker ``index``'s process group (a crash, for fault tests) and reap it."""
        child = self._worker(index)
        child.signal_group(signal.SIGKILL)
        child.reap()
        return child.info()

    def restart_worker(self, index: int = 0) -> ServerProcess:
        """Start worker ``index`` again at its old port (it must have exited) and wait until it is ready.

        The dispatcher knows a worker by its address, so the new process takes over the old one's tasks.
        """
        old = self._worker(index)
        if old.exit_code() is None:
            raise ServiceError(f"restart_worker: expected {old.role} to have exited, found it running")
        old.reap()
        new = self._spawn_worker(role=old.role, port=old.port)
        self._children[self._children.index(old)] = new
        try:
            self._await_ready([new])
        except BaseException:
            new.reap()
            raise
        return new.info()

    def _worker(self, index: int) -> _Child:
        workers = self._workers()
        if not 0 <= index < len(workers):
            raise ValueError(f"index: expected 0 <= index < {len(workers)} (started workers), found {index}")
        return workers[index]


# ----------------------------------------------------------------------------------- distribute




def py_function_ops(dataset) -> tuple[str, ...]:
    """The kinds of the Python-callback ops (PyFunc, EagerPyFunc, ...) the dataset runs, from its pipeline model."""
    return tuple(sorted({op.op for op in read_pipeline(dataset).model.python_ops}))


def distribute(source, *, cluster: ServiceCluster | None = None, address: str | None = None,
               processing_mode: str, job_name: str | None = None,
               max_outstanding_requests: int | None = None):
    """``source`` (a perfsuite Loader or a tf.data.Dataset) read through the tf.data service.

    Exactly one of cluster (started) or address (``grpc://host:port``). processing_mode is
    'parallel_epochs' or 'distributed_epoch'. Consumers sharing a job_name share one job (and so
    split its data); without it every iteration is its own job. Raises ServiceError for a dataset
    that calls Python functions (it cannot run in a worker process) or that was prefetched to a
    device (the copy to the device belongs in the consumer, after distribute). Read it through
    with_deadline() so a lost worker cannot block the reader forever.
    """
    if processing_mode not in PROCESSING_MODES:
        raise ValueError(f"processing_mode: expected one of {PROCESSING_MODES}, found {processing_mode!r}")
    if (cluster is None) == (address is None):
        raise ValueError("distribute: expected exactly one of cluster= or address=")
    service = cluster.address if cluster is not None else "grpc://{}:{}".format(*_host_port(address))
    dataset, what = _dataset_of(source)
    ops = py_function_ops(dataset)
    if ops:
        raise ServiceError(f"{what}: expected graph ops only, to run on a tf.data service worker (a "
                           f"separate process), found Python-function ops {list(ops)}: the Python function "
                           "exists only in this process. Use a tf_native loader")
    tf = tensorflow()
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=processing_mode, service=service, job_name=job_name,
        max_outstanding_requests=max_outstanding_requests))


def _dataset_of(source):
    from perfsuite.data.loaders import Loader

    if isinstance(source, Loader):
        config = source.config
        what = f"loader {config.id}"
        if config.kind != "tf_native":
            raise ServiceError(f"{what}: expected a tf_native loader, to run on a tf.data service worker (a "
                               f"separate process), found kind {config.kind!r}, whose Python function exists "
                               "only in this process")
        if config.prefetch_to_device:
            raise ServiceError(f"{what}: expected no prefetch_to_device (it belongs in the consumer, after "
                               f"distribute), found prefetch_to_device={config.prefetch_to_device!r}")
        return source.dataset, what
    tf = tensorflow()
    if not isinstance(source, tf.data.Dataset):
        raise TypeError("source: expected a perfsuite Loader or a tf.data.Dataset, "
                        f"found {type(source).__name__}")
    return source, "dataset"


# ---------------------------------------------------------------------------------- bounded read


@functools.cache
def _get_next_function():
    tf = tensorflow()

    @tf.function
    def get_next(iterator):
        return iterator.get_next_as_optional()

    return get_next


class DeadlineDataset:
    """A dataset read with a bound on the wait for each batch; every iter() is a fresh pass."""

    def __init__(self, dataset, *, batch_timeout_s: float, cluster: ServiceCluster | None = None):
        if not batch_timeout_s > 0:
            raise ValueError(f"batch_timeout_s: expected > 0, found {batch_timeout_s!r}")
        self.dataset = dataset
        self.batch_timeout_s = batch_timeout_s
        self.cluster = cluster

    @property
    def element_spec(self):
        return self.dataset.element_spec

    def __iter__(self) -> DeadlineIterator:
        return DeadlineIterator(self.dataset, batch_timeout_s=self.batch_timeout_s, cluster=self.cluster)


def with_deadline(dataset, *, batch_timeout_s: float = DEFAULT_BATCH_TIMEOUT_S,
                  cluster: ServiceCluster | None = None) -> DeadlineDataset:
    """``dataset`` (e.g. from distribute) read so that no batch waits longer than batch_timeout_s.

    A batch that takes longer cancels the read and raises ServiceError naming the cluster's exited
    processes (pass cluster= for that). The first batch includes job start-up: allow for it.
    """
    return DeadlineDataset(dataset, batch_timeout_s=batch_timeout_s, cluster=cluster)


class _Watchdog:
    """Calls cancel() once a wait started with begin() has lasted longer than timeout_s.

    Its thread holds only this object, not the iterator, so an iterator dropped mid-epoch is still
    collected (and closes its watchdog).
    """

    def __init__(self, *, cancel, timeout_s: float):
        self._cancel = cancel
        self._timeout_s = timeout_s
        self._waiting_since: float | None = None
        self._done = threading.Event()
        self.fired = False
        threading.Thread(target=self._run, name="perfsuite-service-deadline", daemon=True).start()

    def begin(self) -> None:
        self._waiting_since = time.monotonic()

    def end(self) -> None:
        self._waiting_since = None

    def close(self) -> None:
        self._done.set()

    def _run(self) -> None:
        poll_s = min(0.1, self._timeout_s / 10)
        while not self._done.wait(poll_s):
            since = self._waiting_since
            if since is not None and time.monotonic() - since > self._timeout_s:
                self.fired = True
                self._cancel()
                return


class DeadlineIterator:
    """Iterates a dataset; a batch not there within batch_timeout_s cancels the read (ServiceError).

    Each batch is fetched by a tf.function run under a cancellation manager, which a watchdog
    thread cancels when the deadline passes: TensorFlow then ends the blocked GetNext with
    CancelledError, so no thread is left stuck in the service client.
    """

    def __init__(self, dataset, *, batch_timeout_s: float, cluster: ServiceCluster | None):
        from tensorflow.python.eager import cancellation  # no public API cancels an eager call

        self._iterator = iter(dataset)
        manager = cancellation.CancellationManager()
        concrete = _get_next_function().get_concrete_function(self._iterator)
        self._get_next = manager.get_cancelable_function(concrete)
        self._timeout_s = batch_timeout_s
        self._cluster = cluster
        self._watchdog = _Watchdog(cancel=manager.start_cancel, timeout_s=batch_timeout_s)
        self._finished = False
        self.batches = 0

    def __iter__(self) -> DeadlineIterator:
        return self

    def __next__(self):
        if self._finished:
            raise StopIteration
        self._watchdog.begin()
        try:
            optional = self._get_next(self._iterator)
            has_value = bool(optional.has_value())
        except tensorflow().errors.CancelledError as error:
            self.close()
            if self._watchdog.fired:
                raise self._timeout_error() from error
            raise
        except BaseException:
            self.close()
            raise
        finally:
            self._watchdog.end()
        if not has_value:
            self.close()
            raise StopIteration
        self.batches += 1
        return optional.get_value()

    def close(self) -> None:
        """Stop reading; dropping the TF iterator releases its tf.data service job at once."""
        self._finished = True
        self._watchdog.close()
        self._iterator = self._get_next = None

    def __del__(self):
        self._watchdog.close()

    def _timeout_error(self) -> ServiceError:
        where = f" at {self._cluster.address}" if self._cluster is not None else ""
        state = ""
        if self._cluster is not None:
            exited = self._cluster.exited()
            state = (f" Exited: {'; '.join(p.describe() for p in exited)}." if exited
                     else f" No server process has exited ({self._cluster.describe()}).")
        return ServiceError(
            f"tf.data service{where}: expected a batch within {self._timeout_s:g} s, found none after "
            f"{self.batches} batch(es); the read was cancelled.{state} TensorFlow retries a lost worker's "
            "task until a worker returns at the same address, so without this bound the read would block "
            "forever")


# ------------------------------------------------------------------------------- server processes


def _watch_owner(owner_pid: int) -> None:
    """Exit when the process that started this server is gone (the parent then changes)."""
    while os.getppid() == owner_pid:
        time.sleep(0.5)
    os._exit(3)


def _check_port_free(port: int) -> str | None:
    """Why port cannot be served on, or None. Checked before TensorFlow's slow import.

    gRPC binds with SO_REUSEPORT, so it would share a port another gRPC server holds, and the two
    would split the connections; a bind without SO_REUSEPORT fails on any port a socket listens on.
    SO_REUSEADDR lets it pass connections in TIME_WAIT, as a worker restarted at its old port has.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as error:
            return f"--port: expected a free port, found {port} in use ({error.strerror})"
    return None


def _write_ready(path: Path, payload: dict) -> None:
    write_atomic(path, json.dumps(payload))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     description="a tf.data service server process")
    roles = parser.add_subparsers(dest="role", required=True)
    dispatcher = roles.add_parser("dispatcher", help="run a dispatcher")
    dispatcher.add_argument("--port", type=int, required=True, metavar="PORT")
    dispatcher.add_argument("--work-dir", default=None, metavar="DIR", help="dispatcher state directory")
    dispatcher.add_argument("--fault-tolerant", action="store_true",
                            help="journal the dispatcher's state in --work-dir so it survives restarts")
    dispatcher.add_argument("--worker-timeout-ms", type=int, default=None, metavar="MS",
                            help="drop a worker whose heartbeat is this late. Default: TensorFlow's")
    dispatcher.add_argument("--job-gc-check-interval-ms", type=int, default=None, metavar="MS")
    dispatcher.add_argument("--job-gc-timeout-ms", type=int, default=None, metavar="MS",
                            help="collect a job nobody has read for this long. Default: TensorFlow's")
    worker = roles.add_parser("worker", help="run a worker")
    worker.add_argument("--dispatcher", required=True, metavar="HOST:PORT")
    worker.add_argument("--port", type=int, required=True, metavar="PORT")
    worker.add_argument("--worker-address", default=None, metavar="HOST:PORT",
                        help="address consumers use for this worker. Default: localhost:PORT")
    worker.add_argument("--heartbeat-interval-ms", type=int, default=None, metavar="MS")
    for role in (dispatcher, worker):
        role.add_argument("--ready-file", default=None, metavar="PATH",
                          help="written (JSON: pid, port) once the server has started")
        role.add_argument("--owner-pid", type=int, default=None, metavar="PID",
                          help="the parent's PID: exit when the parent is gone")
    return parser


def _server(args):
    service = tensorflow().data.experimental.service
    if args.role == "dispatcher":
        return service.DispatchServer(service.DispatcherConfig(
            port=args.port, work_dir=args.work_dir, fault_tolerant_mode=args.fault_tolerant,
            worker_timeout_ms=args.worker_timeout_ms, job_gc_check_interval_ms=args.job_gc_check_interval_ms,
            job_gc_timeout_ms=args.job_gc_timeout_ms))
    return service.WorkerServer(service.WorkerConfig(
        dispatcher_address=args.dispatcher, worker_address=args.worker_address, port=args.port,
        heartbeat_interval_ms=args.heartbeat_interval_ms))


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.owner_pid is not None and args.owner_pid != os.getppid():
        parser.error(f"--owner-pid: expected this process's parent ({os.getppid()}), found {args.owner_pid}")
    problem = _check_port_free(args.port) if args.port else None
    if problem:
        parser.exit(1, f"{parser.prog} {args.role}: {problem}\n")
    if args.owner_pid is not None:
        threading.Thread(target=_watch_owner, args=(args.owner_pid,), daemon=True).start()
    server = _server(args)  # started; a worker has registered with the dispatcher
    if args.ready_file:
        _write_ready(Path(args.ready_file), {"pid": os.getpid(), "port": args.port})
    print(f"perfsuite.workload.service {args.role} serving on port {args.port}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
