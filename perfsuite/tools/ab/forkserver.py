"""The fork server of ``perfsuite ab``: one process that imports the heavy third-party modules once
(TensorFlow's import alone takes seconds, every pass, on both sides: docs/ab.md, "The fork server")
and forks every worker from there, as multiprocessing's forkserver does with its preload list.

Run as a script by the controller (``python -c <boot> forkserver.py CONTROL_FD MODULE...``), with the
controller's interpreter and environment and neither side's tree on the import path: it uses the
standard library only, and refuses to start if a preloaded module pulled in ``perfsuite`` (a worker must
import its own side's). Each request on the control socket carries a worker's settings (its tree,
environment, script and arguments) and three file descriptors (events, commands, log). The server forks
a short-lived child, which forks the worker and exits at once: the worker is orphaned and adopted by
the controller (a child subreaper, Linux), so the controller waits for it, sees it stop and reaps it as
any child of its own. The worker then runs the worker script as a fresh interpreter would, with the
preloaded modules already imported: its own session, the side's tree as working directory and first
on sys.path, the side's environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import runpy
import signal
import socket
import sys
import time

PR_SET_PDEATHSIG = 1
REPARENT_TIMEOUT_S = 10.0
EXIT_NOT_ADOPTED = 71  # the controller did not adopt the worker (it has gone, or is no subreaper)


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value)


def preload(modules: list[str]) -> dict:
    """Import each module; what failed and why, and the import seconds of each."""
    seconds, failed = {}, {}
    for name in modules:
        start = time.perf_counter()
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - reported to the controller, which says so
            failed[name] = f"{type(error).__name__}: {error}"
        seconds[name] = round(time.perf_counter() - start, 3)
    leaked = sorted(name for name in sys.modules if name == "perfsuite" or name.startswith("perfsuite."))
    return {"seconds": seconds, "failed": failed, "leaked": leaked}


def _become_worker(request: dict, events_fd: int, commands_fd: int, log_fd: int, controller: int) -> int:
    """In the worker (the grandchild): wait to be adopted by the controller, tie its life to the
    controller's, take the side's session, files, tree and environment, and run the worker script."""
    deadline = time.monotonic() + REPARENT_TIMEOUT_S
    while os.getppid() != controller:
        if time.monotonic() > deadline:
            return EXIT_NOT_ADOPTED
        time.sleep(0.0005)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != controller:  # the controller died before the line above
        return EXIT_NOT_ADOPTED
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    for fd in (null, log_fd):
        os.close(fd)
    root = request["root"]
    os.chdir(root)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path.insert(1 if sys.path and sys.path[0] == "" else 0, root)  # where PYTHONPATH would put it
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    sys.argv = [request["script"], str(events_fd), str(commands_fd), *request["args"]]
    try:
        runpy.run_path(request["script"], run_name="__main__")
        return 0
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)


def _fork_worker(request: dict, fds: list[int], controller: int) -> int:
    """Fork the go-between, which forks the worker and exits; the worker's pid."""
    pid_read, pid_write = os.pipe()
    between = os.fork()
    if between == 0:
        status = 1
        try:
            os.close(pid_read)
            worker = os.fork()
            if worker == 0:
                os.close(pid_write)
                status = 1
                try:
                    status = _become_worker(request, *fds, controller)
                finally:
                    with contextlib.suppress(Exception):
                        sys.stdout.flush()
                        sys.stderr.flush()
                    os._exit(status)
            os.write(pid_write, str(worker).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(pid_write)
    for fd in fds:
        os.close(fd)
    with os.fdopen(pid_read, "rb") as stream:
        text = stream.read().decode()
    os.waitpid(between, 0)
    return int(text) if text else -1


def main(argv: list[str]) -> int:
    """argv: CONTROL_FD MODULE... Preload, say so, then fork one worker per request until the
    controller closes the socket."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    control = socket.socket(fileno=int(argv[0]))
    controller = os.getppid()
    loaded = preload(argv[1:])
    control.sendall(json.dumps({"event": "preloaded", **loaded}).encode())
    if loaded["leaked"]:
        return 1
    while True:
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
        if not message:
            return 0
        pid = _fork_worker(json.loads(message), fds, controller)
        control.sendall(json.dumps({"event": "forked", "pid": pid}).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
