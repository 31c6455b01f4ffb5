"""Iterators a measurement creates are torn down on a background thread, not by the caller."""

import os
import threading
import time

from perfsuite.measure.teardown import iterate

# The one reaper thread drops iterators in turn: a tf.data iterator an earlier test on this worker dropped can
# hold it for tens of seconds (the module docstring), so the destructor is awaited that long, not 10 s.
REAPER_WAIT_S = 120


class _SlowToDestroy:
    """An iterable whose iterators take ``seconds`` to destroy and say on which thread they were."""

    def __init__(self, seconds):
        self.seconds, self.destroyed, self.thread = seconds, threading.Event(), None

    def __iter__(self):
        owner = self

        class Iterator:
            def __init__(self):
                self.items = iter([1, 2])

            def __next__(self):
                return next(self.items)

            def __del__(self):
                time.sleep(owner.seconds)
                owner.thread = threading.current_thread().name
                owner.destroyed.set()

        return Iterator()


def test_dropping_an_iterator_it_created_does_not_wait_for_its_destructor():
    source = _SlowToDestroy(seconds=1.0)
    iterator = iterate(source)
    assert [next(iterator), next(iterator)] == [1, 2]
    started = time.perf_counter()
    del iterator
    assert time.perf_counter() - started < 0.5
    assert source.destroyed.wait(timeout=REAPER_WAIT_S)
    assert source.thread == "perfsuite-teardown"


def test_an_iterator_passed_in_stays_the_callers_and_items_and_the_end_pass_through():
    own = iter([1, 2])
    assert iterate(own) is own
    assert list(iterate(range(3))) == [0, 1, 2]



def test_a_forked_process_tears_down_on_a_thread_of_its_own():
    parent = _SlowToDestroy(seconds=0.0)
    iterator = iterate(parent)
    del iterator
    assert parent.destroyed.wait(timeout=REAPER_WAIT_S)  # the parent's thread runs; a forked child has no copy of it
    pid = os.fork()
    if pid == 0:
        child = _SlowToDestroy(seconds=0.0)
        iterator = iterate(child)
        del iterator
        os._exit(0 if child.destroyed.wait(timeout=REAPER_WAIT_S) and child.thread == "perfsuite-teardown" else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
