"""CPU cost of decoding a WAV in a tf.data map: tf.audio.decode_wav against tf.io.decode_raw at the offset
preflight found (what perfsuite.data.layout does), with the bare read as the floor.

    python scripts/measure_decode_cost.py [--rounds 5] [--workers 2]

Prints samples/s and µs of CPU per utterance (workers / rate) for each, as the median of interleaved
rounds over the default synthetic corpus (built on first use).
"""

import argparse
import time

import numpy as np

from perfsuite._tensorflow import tensorflow
from perfsuite.data.corpus import PRESETS, build_corpus, read_metadata, wav_path
from perfsuite.data.wav import check_tf_readable
from perfsuite.measure.rounds import interleaved

tf = tensorflow()



def pipelines(paths, infos, workers, batch_size=16):
    def mapped(columns, fn):
        return (tf.data.Dataset.from_tensor_slices(columns).map(fn, num_parallel_calls=workers)
                .batch(batch_size).prefetch(tf.data.AUTOTUNE))

    offsets = [info.data_offset for info in infos]
    lengths = [info.num_frames * info.block_align for info in infos]
    return {
        "read": lambda: mapped(paths, lambda p: tf.strings.length(tf.io.read_file(p))),
        "read+decode_wav": lambda: mapped(paths, lambda p: tf.shape(
            tf.audio.decode_wav(tf.io.read_file(p), desired_channels=1).audio)),
        "read+decode_raw": lambda: mapped((paths, offsets, lengths), lambda p, o, n: tf.shape(
            tf.cast(tf.io.decode_raw(tf.strings.substr(tf.io.read_file(p), o, n), tf.int16), tf.float32)
            * (1 / 32768))),
    }


def rate(dataset, batches=20, warmup=3):
    iterator = iter(dataset.repeat())
    for _ in range(warmup):
        next(iterator)
    start, samples = time.perf_counter(), 0
    for _ in range(batches):
        samples += int(next(iterator).shape[0])
    return samples / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    corpus = build_corpus(PRESETS["default"])
    paths = [str(wav_path(corpus, utt.id)) for utt in read_metadata(corpus)]
    infos = [check_tf_readable(path, sample_rate=22050) for path in paths]
    builders = pipelines(paths, infos, args.workers)
    # forwards, then backwards (measure.rounds.alternating)
    rates, _ = interleaved({name: (lambda build=build: rate(build())) for name, build in builders.items()},
                           rounds=args.rounds)
    for name, values in rates.items():
        median = float(np.median(values))
        print(f"{name:16s} {median:9.0f} samples/s  {args.workers * 1e6 / median:6.0f} µs CPU/utterance")


if __name__ == "__main__":
    main()
