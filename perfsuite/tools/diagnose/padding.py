"""The padding fix of diagnose --pipeline: the user's step on batches of the pipeline as they are padded vs
the same samples with their padding past each true clip removed, timed on the user's own step at the real
length distribution (a step's cost that grows with frames is what padding wastes)."""

from __future__ import annotations

import time
from collections.abc import Callable

from perfsuite.tools.diagnose.fixes import NotApplicable
from perfsuite.tools.diagnose.streams import Stream

PADDING_BATCHES = 16  # batches taken from the pipeline once, fed to the step as padded and as trimmed


def replaced(batch, values: dict):
    """batch with the components at the given paths (batch_spec.leaves' paths) replaced."""
    def walk(item, path: str):
        if path in values:
            return values[path]
        if isinstance(item, dict):
            return {key: walk(item[key], f"{path}/{key}" if path else str(key)) for key in item}
        if isinstance(item, tuple | list):
            return type(item)(walk(x, f"{path}/{i}" if path else str(i)) for i, x in enumerate(item))
        return item

    return walk(batch, "")


def trimmed(batch, layout):
    """batch with its audio cut to its longest true clip (speech.canonical_batch's lengths) and its length
    tensor, when it has one, holding the true lengths."""
    from perfsuite._tensorflow import tensorflow
    from perfsuite.measure.speech import canonical_batch

    tf = tensorflow()
    canonical = canonical_batch(batch, layout)
    lengths = canonical["mel_len"]
    longest = int(max(lengths)) if len(lengths) else 0
    values = {layout.mel: tf.convert_to_tensor(canonical["mel"])[:, :max(longest, 1)]}
    if layout.mel_len is not None:
        given = dict(_leaves(batch))[layout.mel_len]
        values[layout.mel_len] = tf.cast(tf.convert_to_tensor(lengths), given.dtype)
    return replaced(batch, values)


def _leaves(batch):
    from perfsuite.measure.batch_spec import leaves

    return leaves(batch)


class PaddingComparison:
    """The step on PADDING_BATCHES batches of the pipeline as they are padded vs each cut to its longest true
    clip (what padded_batch to the longest does), after a warm-up round (a tf.function step traces each new
    length once). Not applicable without a step, an audio component with padding past each batch's longest,
    or when the step refuses the shorter batches."""

    name, words = "padding", "padding each batch to its longest clip instead of a fixed length"
    unit = f"steps/s of the step on {PADDING_BATCHES} of the pipeline's batches"
    warmup_rounds = 1

    def __init__(self, step: Callable | None, dataset, spec: str, *, layout, padding):
        self.step, self.dataset, self.spec, self.layout, self.padding = step, dataset, spec, layout, padding
        self.sides: dict[str, list] = {}

    def prepare(self) -> None:
        layout, padding = self.layout, self.padding
        if self.step is None:
            raise NotApplicable("needs --step: the gain is the step's")
        if layout is None or layout.mel is None or layout.ragged or padding is None or padding.beyond_longest <= 0:
            raise NotApplicable("no padding past each batch's longest clip was measured")
        stream = Stream(self.dataset, self.spec)
        padded = [stream.next() for _ in range(PADDING_BATCHES)]
        stream.close()
        try:
            cut = [trimmed(batch, layout) for batch in padded]
            self.step(cut[0])
        except Exception as error:  # noqa: BLE001 -- the user's step may refuse another length: said, not raised
            raise NotApplicable(f"the step refused batches cut to their longest clip: {error}") from None
        self.sides = {"before": padded, "after": cut}

    def rate(self, side: str, read_s: float) -> float:
        start = time.perf_counter()
        for batch in self.sides[side]:
            self.step(batch)
        return len(self.sides[side]) / (time.perf_counter() - start)

    def close(self) -> None:
        self.sides = {}
