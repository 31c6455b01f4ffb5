"""The argparse types every option shares (perfsuite/options.py): what each accepts and how it refuses."""

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.options import fraction, integer, named, seconds


@given(st.floats(min_value=1e-9, max_value=1 - 1e-9))
def test_a_fraction_between_0_and_1_is_taken_as_it_is(value):
    assert fraction(repr(value)) == value


@pytest.mark.parametrize("text", ["0", "1", "-0.5", "1.5", "nan", "x", ""])
def test_a_fraction_outside_0_1_says_what_it_expected_and_found(text):
    expected = f"expected a number between 0 and 1, found {text!r}"
    with pytest.raises(argparse.ArgumentTypeError, match=expected):
        fraction(text)


@pytest.mark.parametrize("text", ["0", "-1", "inf", "nan", "soon"])
def test_seconds_must_be_finite_and_positive(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a number of seconds > 0"):
        seconds(text)
    assert seconds("0.5") == 0.5


def test_integers_have_a_minimum_and_autotune_where_asked():
    assert integer(1)("3") == 3 and integer(1, autotune=True)("-1") == -1
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected an integer >= 1, found '-1'"):
        integer(1)("-1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"or -1 \(AUTOTUNE\), found '2.5'"):
        integer(1, autotune=True)("2.5")


def test_a_named_type_puts_the_option_in_its_message():
    expected = "--perfsuite-compare-alpha: expected a number between"
    with pytest.raises(argparse.ArgumentTypeError, match=expected):
        named("--perfsuite-compare-alpha", fraction)("2")
    assert named("--x", integer(1))("4") == 4
