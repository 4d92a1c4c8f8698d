"""Trend plot of one series and metric: every run (untrusted ones crossed out), segment means, change points.

Caveats:
- matplotlib is imported inside the function (Agg backend), so importing this module stays cheap.
- The PNG is written whole (tmp file and rename): a full disk leaves the previous plot, never a torn one.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from scripts.benchmark.history.gate import SeriesTrace

from miles.utils.bench_metrics import write_bytes_atomic


def plot_trace(trace: SeriesTrace, out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(9, 3.5))
    xs_ok = [r.id for r, v in zip(trace.runs, trace.values, strict=True) if v is not None and r.trusted]
    ys_ok = [v for r, v in zip(trace.runs, trace.values, strict=True) if v is not None and r.trusted]
    xs_bad = [r.id for r, v in zip(trace.runs, trace.values, strict=True) if v is not None and not r.trusted]
    ys_bad = [v for r, v in zip(trace.runs, trace.values, strict=True) if v is not None and not r.trusted]
    ax.plot(xs_ok, ys_ok, "o-", color="tab:blue", markersize=3, linewidth=1, label="trusted run")
    if xs_bad:
        ax.plot(xs_bad, ys_bad, "x", color="tab:red", label="untrusted run")
    bounds = [0] + [c.point.index for c in trace.changes] + [len(trace.trusted_runs)]
    for k in range(len(bounds) - 1):
        seg = trace.trusted_runs[bounds[k] : bounds[k + 1]]
        mean = sum(v for r, v in zip(trace.runs, trace.values, strict=True) if r in seg) / len(seg)
        ax.hlines(mean, seg[0].id, seg[-1].id, colors="tab:green", linewidth=2)
    for c in trace.changes:
        ax.axvline(c.first_run_after.id - 0.5, color="tab:orange", linestyle="--")
        ax.annotate(f"{c.point.change:+.1%}", (c.first_run_after.id, c.point.mean_after), fontsize=8)
    ax.set_xlabel("run id (insertion order)")
    ax.set_ylabel(trace.metric)
    ax.set_title(trace.series, fontsize=9)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path = out_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', trace.series)}__{trace.metric}.png"
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(path, image.getvalue())
    return path
