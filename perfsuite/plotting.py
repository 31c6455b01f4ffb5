"""matplotlib access shared by perfsuite's reports: the one place that imports it.

matplotlib is optional (the `report` extra), so it is imported only when a plot is drawn, with the Agg
backend (no display needed). require_matplotlib lets a command refuse an option before it measures.
This module sits below every layer: it imports nothing from perfsuite but perfsuite.errors.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from perfsuite.errors import ReportUnavailable

EXTRA_HINT = "pip install 'perfsuite[report]' (the 'test' extra includes it too)"


def require_matplotlib(option: str) -> None:
    """Raise ReportUnavailable naming `option` and the extra when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise ReportUnavailable(f"{option} needs matplotlib, which cannot be imported ({error}): "
                                f"{EXTRA_HINT}") from None


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_timeline(ax, name: str, batch_s, samples_per_s: float, period: int | None, *, unit: str = "batch",
                  round_lengths=None) -> None:
    """One per-batch (or per-call) time series in seconds, a detected cycle's period (None: no significant
    cycle) marked by red dotted lines and, when round_lengths (batches per round, in order) are given, the
    boundaries between measurement rounds by grey dashed ones."""
    times_ms = [s * 1e3 for s in batch_s]
    for x in itertools.accumulate((round_lengths or [])[:-1]):
        ax.axvline(x - 0.5, color="grey", linestyle="--", linewidth=0.6, alpha=0.6)
    ax.plot(range(len(times_ms)), times_ms, marker=".", linewidth=0.8)
    title = f"{name}: {samples_per_s:.0f} samples/s"
    if period is not None:
        for x in range(0, len(times_ms), period):
            ax.axvline(x, color="red", linestyle=":", linewidth=0.8)
        title += f", cycle every {period} {'batches' if unit == 'batch' else unit + 's'}"
    else:
        title += ", no significant cycle"
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(f"ms / {unit}")


def save(plt, figure, path: Path) -> Path:
    """Write figure to path as a PNG and free it; return path."""
    figure.tight_layout()
    figure.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(figure)
    return path


def file_stem(text: str) -> str:
    """text made safe as a file name: runs of other characters become '-', at most 120 characters."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text).strip("-")[:120]
