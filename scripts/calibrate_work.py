"""What a change of float ops means in time, for the TF-native mel: the work fingerprint beside the timing.

The TF-native WAV loader of benchmarks/test_loaders.py (batch 16, 2 workers) over a seeded corpus, and copies
of it with more mel work planted in its map (one more mel over a fraction of every clip's samples, the way
tests/test_work.py plants it). For each copy: the change of its float ops per audio second (its work
fingerprint, perfsuite.measure.work) and the change of its samples/s, timed against the unchanged loader in
the same run, in interleaved rounds (the order alternating per round, perfsuite.measure.rounds), each round's
ratio paired within the round; printed as the median of the per-round ratios and their range.

    python scripts/calibrate_work.py --rounds 8                   # the calibration; a quiet machine
    python scripts/calibrate_work.py --rounds 1 --batches 2       # a smoke run: it runs, figures mean nothing

The figures of a run belong in docs/results/, with the machine and the date.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from perfsuite._tensorflow import tensorflow
from perfsuite.data.audio import MelConfig, log_mel_tf
from perfsuite.data.corpus import PRESETS, build_corpus
from perfsuite.data.loaders import LoaderConfig, build_loader
from perfsuite.measure.rounds import interleaved
from perfsuite.measure.timing import measure_dataset
from perfsuite.measure.work import dataset_work, mel_seconds

MEL = MelConfig()
FRAME_S = MEL.hop_length / MEL.sample_rate
BASE = "base"


def extra_mel(fraction: float):
    """map_extra: one more mel over ``fraction`` of the clip's samples (a signal built from the mel's own
    values, so that no work is folded away), added to the mel times 0."""
    tf = tensorflow()

    def extra(mel, element):
        samples = tf.cast(tf.cast(tf.shape(mel)[0] * MEL.hop_length, tf.float32) * fraction, tf.int32)
        signal = tf.tile(tf.reshape(mel, [-1]), [-(-MEL.hop_length // MEL.n_mels)])[:samples]
        return mel + 0.0 * tf.reduce_mean(log_mel_tf(signal, MEL))

    return extra


def loaders(corpus: Path, fractions: list[float]) -> dict:
    config = LoaderConfig(kind="tf_native", source="wav", batch_size=16, num_parallel_calls=2)
    out = {BASE: build_loader(dataset_dir=corpus, config=config).dataset}
    for fraction in fractions:
        out[f"+{fraction:.0%}"] = build_loader(dataset_dir=corpus, config=config,
                                               map_extra=extra_mel(fraction)).dataset
    return out


def float_op_changes(datasets: dict) -> dict:
    figures = {label: dataset_work(dataset, name=label, audio_seconds=mel_seconds(FRAME_S)).work[
        "float_ops_per_audio_s"] for label, dataset in datasets.items()}
    return {label: figures[label] / figures[BASE] - 1 for label in datasets if label != BASE}


def timed_changes(datasets: dict, rounds: int, batches: int) -> dict:
    """Per planted copy: each round's (base samples/s over the copy's) - 1, paired within the round."""
    runs = {label: (lambda d=dataset: measure_dataset(dataset=d.repeat(), warmup_batches=2,
                                                      measure_batches=batches, name="calibrate").samples_per_s)
            for label, dataset in datasets.items()}
    values, _ = interleaved(runs, rounds=rounds, warmup_rounds=1)
    return {label: [base / planted - 1 for base, planted in zip(values[BASE], values[label])]
            for label in datasets if label != BASE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds, each timing every loader once")
    parser.add_argument("--batches", type=int, default=30, help="timed batches per loader and round")
    parser.add_argument("--fractions", default="0.05,0.1,0.2", help="mel work planted (default: %(default)s)")
    parser.add_argument("--corpus", default="tiny", choices=sorted(PRESETS), help="seeded corpus preset")
    parser.add_argument("--data-dir", type=Path, default=None, help="where corpora are built (default: the cache)")
    args = parser.parse_args()
    if args.rounds < 1 or args.batches < 1:
        parser.error("expected --rounds and --batches of at least 1")
    fractions = [float(f) for f in args.fractions.split(",")]
    datasets = loaders(build_corpus(PRESETS[args.corpus], root=args.data_dir), fractions)
    flops = float_op_changes(datasets)
    timed = timed_changes(datasets, args.rounds, args.batches)
    print(f"TF-native mel, {args.rounds} interleaved round(s) of {args.batches} batches, corpus {args.corpus}")
    print(f"{'planted':>8}  {'float ops / audio-s':>20}  {'time per sample (median)':>25}  {'range':>18}")
    for label in flops:
        ratios = timed[label]
        print(f"{label:>8}  {flops[label]:>+19.1%}  {statistics.median(ratios):>+24.1%}  "
              f"{min(ratios):+.1%} .. {max(ratios):+.1%}")


if __name__ == "__main__":
    main()
