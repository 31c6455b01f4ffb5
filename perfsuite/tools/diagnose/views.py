"""The dataset as diagnose measures it: the readable utterances, a usable .npy cache, and views that
list each utterance several times when there are fewer than one measurement round draws."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from perfsuite.verdict.diagnosis_figures import CacheUse, DiagnoseSettings


def readable_utterances(dataset_dir: Path, mel_config) -> list:
    """The utterances whose WAV the loaders can read (their records: id, tokens, mel_frames)."""
    from perfsuite.data.loaders import LoaderConfig, preflight
    from perfsuite.errors import DataError

    config = LoaderConfig(kind="tf_native", source="wav", on_error="skip")
    records, skipped = preflight(dataset_dir=dataset_dir, config=config, cache_dir=None, mel_config=mel_config)
    if not records:
        raise DataError(dataset_dir, expected="at least one readable utterance", found=f"none ({len(skipped)} skipped)")
    return records


@contextlib.contextmanager
def measured_data(dataset_dir: Path, cache_dir: Path | None, ids: list[str], copies: int, mel_config,
                  note: Callable[[str], None]) -> Iterator[tuple[Path, Path, CacheUse]]:
    """(dataset dir, cache dir, the cache used) to measure. The cache: the given one, the default one, or one
    built in a temporary directory from a view of the readable utterances (build_cache stops at the first
    unreadable WAV). The data: the dataset, or a temporary view listing each of ids `copies` times."""
    from perfsuite.data.corpus import build_cache, default_cache_dir

    cache = Path(cache_dir or default_cache_dir(dataset_dir, mel_config))
    with contextlib.ExitStack() as temporary:
        if built := cache_dir is None and not cache.is_dir():
            note("building a temporary .npy cache from the readable files")
            folder = Path(temporary.enter_context(tempfile.TemporaryDirectory(prefix="perfsuite-diagnose-cache-")))
            _write_view(dataset_dir, None, entries=[(uid, uid) for uid in ids], root=folder / "readable",
                        view_cache=None)
            cache = build_cache(folder / "readable", mel_config=mel_config, cache_dir=folder / "cache")
        use = CacheUse(dir=None if built else str(cache), temporary=built)
        if copies == 1:
            yield dataset_dir, cache, use
            return
        note(f"only {len(ids)} usable utterance(s): measuring on {copies} copies of each (repeated epochs)")
        folder = Path(temporary.enter_context(tempfile.TemporaryDirectory(prefix="perfsuite-diagnose-repeated-")))
        write_repeated_view(dataset_dir, cache, ids=ids, copies=copies, root=folder / "data", view_cache=folder / "cache")
        yield folder / "data", folder / "cache", use


def round_samples(settings: DiagnoseSettings) -> int:
    """Samples one measurement round draws at the largest batch size measured."""
    return max(settings.batch_size, *settings.sweep_batch_sizes) * settings.batches


def repeat_copies(usable: int, settings: DiagnoseSettings) -> int:
    """How often each usable utterance is listed: 1 when they fill one round (round_samples), else the fewest
    copies that do with a total divisible by every batch size measured (a partial batch at each pass's end
    would recur in every round: a period to cycle detection) or, if that more than doubles it, the fewest."""
    if usable < 1:
        raise ValueError(f"usable: expected >= 1 utterance, found {usable}")
    needed = round_samples(settings)
    if usable >= needed:
        return 1
    lcm = math.lcm(settings.batch_size, *settings.sweep_batch_sizes)
    step = lcm // math.gcd(usable, lcm)
    full_batches = step * math.ceil(needed / (usable * step))
    return full_batches if full_batches * usable <= 2 * needed else math.ceil(needed / usable)


def write_repeated_view(dataset_dir: Path, cache_dir: Path | None, *, ids: list[str], copies: int, root: Path,
                        view_cache: Path | None) -> list[str]:
    """An LJSpeech-layout view at root listing each of ids `copies` times as `<id>__r<k>`; returns those."""
    width = len(str(copies - 1))
    entries = [(f"{uid}__r{copy:0{width}d}", uid) for copy in range(copies) for uid in ids]
    _write_view(dataset_dir, cache_dir, entries=entries, root=root, view_cache=view_cache)
    return [view_id for view_id, _ in entries]


def _write_view(dataset_dir: Path, cache_dir: Path | None, *, entries: list[tuple[str, str]], root: Path,
                view_cache: Path | None) -> None:
    """An LJSpeech-layout directory at root listing one utterance per (view id, original id) entry, its WAV
    (and, given cache_dir and view_cache, its cache entries) a link to the original file."""
    from perfsuite.data.corpus import cache_paths, read_metadata, wav_path

    utterances = {utt.id: utt for utt in read_metadata(dataset_dir)}
    (root / "wavs").mkdir(parents=True)
    for folder in ("mels", "tokens") if view_cache is not None else ():
        (view_cache / folder).mkdir(parents=True)
    lines = []
    for view_id, uid in entries:
        utt = utterances[uid]
        _link(wav_path(dataset_dir, uid), wav_path(root, view_id))
        if view_cache is not None and cache_dir is not None:
            for source, target in zip(cache_paths(cache_dir, uid), cache_paths(view_cache, view_id)):
                _link(source, target)
        lines.append(f"{view_id}|{utt.text}|{utt.normalized_text}\n")
    (root / "metadata.csv").write_text("".join(lines), encoding="utf-8")


def _link(source: Path, target: Path) -> None:
    """A symlink to source (absolute); a hard link or a copy where symlinks are not allowed."""
    source = Path(source).resolve()
    for link in (os.symlink, os.link):
        with contextlib.suppress(OSError):
            return link(source, target)
    if source.exists():
        shutil.copyfile(source, target)
