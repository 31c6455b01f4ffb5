"""The character tokenizer shared by every loader and by the cache builder.

Vocabulary (id: symbol): 0 is padding, 1 stands for any character outside the vocabulary,
then space, the punctuation ``!'(),-.:;?"`` and the letters a-z. Text is lower-cased first,
so "The" and "the" encode alike. Token 0 never appears in an encoded text, which keeps
zero-padding in a batch distinguishable from real tokens.
"""

import numpy as np

PAD_ID = 0
UNKNOWN_ID = 1
SYMBOLS = " !'(),-.:;?\"" + "abcdefghijklmnopqrstuvwxyz"
VOCAB = ("<pad>", "<unk>", *tuple(SYMBOLS))
VOCAB_SIZE = len(VOCAB)

_ID_OF = {symbol: index for index, symbol in enumerate(VOCAB) if index > UNKNOWN_ID}


def encode(text: str) -> np.ndarray:
    """Token ids (int32, 1-D) of ``text``; unknown characters map to UNKNOWN_ID."""
    return np.array([_ID_OF.get(char, UNKNOWN_ID) for char in text.lower()], dtype=np.int32)


def decode(tokens) -> str:
    """The text of ``tokens`` with padding dropped; unknown characters come back as U+FFFD."""
    return "".join("\ufffd" if t == UNKNOWN_ID else VOCAB[t] for t in np.asarray(tokens).tolist() if t != PAD_ID)
