"""Is a step's first call after the other mode ran slower than the rest? The step ratios' warm-up call.

Two training steps of benchmarks/test_step.py (the default model, a fixed synthetic batch), compiled and
warmed, then ``--rounds`` rounds that alternate which mode runs first, ``--calls`` calls of each mode a
round. Printed per mode: each round's first call over the median of its other calls, their median, and
the median call. A ratio near 1 says a round of that mode needs no untimed call after a switch.

    python scripts/measure_switch_warmup.py --modes eager,graph --batch 8

docs/results/2026-11-27-machine-F.md ("The main job under 10 minutes on machine F") has the runs and figures.
"""

import argparse
import statistics

from perfsuite.measure.rounds import interleaved
from perfsuite.measure.step_model import StepModel
from perfsuite.workload.model import MODEL_PRESETS, make_synthetic_batch, make_train_step

TEXT_LEN, MEL_FRAMES = 80, 400  # as benchmarks/test_step.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="eager,graph", help="two of eager, graph, xla (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=3, help="calls of each mode a round, at least 2")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if len(modes) != 2 or args.calls < 2:
        parser.error("expected two modes and --calls of at least 2")
    batch = make_synthetic_batch(batch_size=args.batch, text_len=TEXT_LEN, mel_frames=MEL_FRAMES, seed=0)
    steps = {mode: make_train_step(model_config=MODEL_PRESETS["default"], mode=mode,
                                   input_shapes=(args.batch, TEXT_LEN, MEL_FRAMES)) for mode in modes}
    models = {mode: StepModel(step, name=mode) for mode, step in steps.items()}
    for model in models.values():  # compile and warm up
        model.first_calls(batch)
    runs = {mode: (lambda model=model: [model.call_s(batch) for _ in range(args.calls)])
            for mode, model in models.items()}
    calls, _ = interleaved(runs, rounds=args.rounds)  # which mode runs first alternates
    for mode, rounds in calls.items():
        firsts = [times[0] / statistics.median(times[1:]) for times in rounds]
        print(f"{mode}: first call / the others' median by round: {' '.join(f'{r:.3f}' for r in firsts)}; "
              f"median {statistics.median(firsts):.3f}; median call "
              f"{statistics.median(t for times in rounds for t in times[1:]):.3f} s")


if __name__ == "__main__":
    main()
