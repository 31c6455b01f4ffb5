"""The character tokenizer: documented vocabulary, lossless round trip, 0 reserved for padding."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.data import text


def test_vocabulary_is_the_documented_one():
    assert text.VOCAB[text.PAD_ID] == "<pad>" and text.PAD_ID == 0
    assert text.VOCAB[text.UNKNOWN_ID] == "<unk>" and text.UNKNOWN_ID == 1
    assert text.VOCAB[2:] == tuple(" !'(),-.:;?\"abcdefghijklmnopqrstuvwxyz")
    assert len(set(text.VOCAB)) == text.VOCAB_SIZE == 2 + 12 + 26
    # Every symbol the module docstring lists is in the vocabulary.
    documented = text.__doc__.split("punctuation")[1].split("``")[1]
    assert set(documented) <= set(text.VOCAB)


def test_encode_gives_int32_ids_in_order():
    tokens = text.encode("ab, z")
    assert tokens.dtype == np.int32 and tokens.ndim == 1
    assert [text.VOCAB[t] for t in tokens] == ["a", "b", ",", " ", "z"]


def test_upper_case_encodes_as_lower_case():
    np.testing.assert_array_equal(text.encode("The Cat."), text.encode("the cat."))


def test_characters_outside_the_vocabulary_are_unknown_not_dropped():
    tokens = text.encode("a1é")
    assert tokens.tolist() == [text.VOCAB.index("a"), text.UNKNOWN_ID, text.UNKNOWN_ID]
    assert text.decode(tokens) == "a\ufffd\ufffd"


def test_empty_text():
    tokens = text.encode("")
    assert tokens.shape == (0,) and tokens.dtype == np.int32


@given(st.text(alphabet=text.SYMBOLS))
def test_round_trip_over_the_vocabulary(sentence):
    tokens = text.encode(sentence)
    assert len(tokens) == len(sentence)
    assert text.decode(tokens) == sentence


@given(st.text())
def test_padding_id_is_never_produced(sentence):
    tokens = text.encode(sentence)
    assert tokens.size == 0 or (tokens.min() >= 1 and tokens.max() < text.VOCAB_SIZE)


@given(st.text(alphabet=text.SYMBOLS, min_size=1), st.integers(0, 5))
def test_decode_drops_padding(sentence, pad):
    padded = np.concatenate([text.encode(sentence), np.zeros(pad, np.int32)])
    assert text.decode(padded) == sentence
