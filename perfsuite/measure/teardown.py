"""Iterators torn down on a background thread, so that a measurement's caller does not wait for it.

Destroying a tf.data iterator can block its caller for tens of seconds after the measurement ended:
the root iterator's destructor waits for a thread of tf.data's own to finish (the autotune model
thread, which sleeps between optimisations, is the likely one; what was seen is in
docs/measurement.md). ``iterate`` hands the iterator it creates, once dropped, to one daemon thread
that drops the last reference there, so the wait costs its caller no wall time.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

_pending: queue.SimpleQueue = queue.SimpleQueue()
_reaper: threading.Thread | None = None
_lock = threading.Lock()


def _drop_forever() -> None:
    while True:
        item = _pending.get()
        del item  # the last reference: the iterator's destructor runs here


def _forget_in_child() -> None:  # a forked process has no copy of the thread: it starts its own
    global _pending, _reaper, _lock
    _pending, _reaper, _lock = queue.SimpleQueue(), None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def _hand_over(iterator: Iterator) -> None:
    global _reaper  # noqa: PLW0603 -- one reaper thread per process, started on first use
    with _lock:
        if _reaper is None:
            _reaper = threading.Thread(target=_drop_forever, name="perfsuite-teardown", daemon=True)
            _reaper.start()
    _pending.put(iterator)


class BackgroundTeardown:
    """An iterator over ``iterator`` that, when dropped, has ``iterator`` destroyed on the background
    thread. It must hold the only reference to ``iterator`` (``iterate`` makes sure of that)."""

    __slots__ = ("_iterator",)

    def __init__(self, iterator: Iterator):
        self._iterator = iterator

    def __iter__(self) -> BackgroundTeardown:
        return self

    def __next__(self) -> Any:
        return next(self._iterator)

    def close_now(self) -> None:
        """The iterator destroyed here, its caller waiting for its threads: where what they still do must end
        first (a failed pipeline's threads write their errors while they stop)."""
        self._iterator = iter(())

    def __del__(self) -> None:
        if not sys.is_finalizing():  # no new thread at interpreter exit: torn down here, as usual
            _hand_over(self._iterator)


def iterate(iterable: Iterable) -> Iterator:
    """``iter(iterable)``; an iterator created here (not ``iterable`` itself) is torn down in the background."""
    iterator = iter(iterable)
    return iterator if iterator is iterable else BackgroundTeardown(iterator)
