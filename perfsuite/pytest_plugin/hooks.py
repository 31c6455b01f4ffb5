"""The perfsuite plugin's hooks: the public seams another pytest plugin plugs into."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_perfsuite_round_driver(config):
    """The measure.rounds.RoundDriver that runs every measurement's rounds in this session, once warmed
    up, instead of the run profile's budget (perfsuite ab's worker returns its own: its controller asks
    for each round); None, or no plugin implementing it: the budget decides. Asked once, when the
    session's context is made."""
