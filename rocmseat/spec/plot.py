"""Pictures of the gate and the advisor, rendered by matplotlib (Agg backend, no display).

matplotlib is optional (the `spec` extra): without it `PlotUnavailable` says so and the caller
reports it; nothing else depends on a picture.
"""

from __future__ import annotations

import importlib
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rocmseat.atomic import write_into
from rocmseat.errors import RocmseatError


class PlotUnavailable(RocmseatError):
    pass


def _pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise PlotUnavailable("no picture: matplotlib is not installed (pip install "
                              "'rocmseat[spec]')") from None
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """The figure as PNG bytes, written by the one writer into a handed directory (a link or
    a FIFO at the name is refused; savefig itself would follow the link or block on the FIFO).
    WriteRefused when it cannot be written."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png")
    finally:
        plt.close(fig)
    return write_into(path.parent, path.name, buffer.getvalue())


def gate_picture(path: Path, arms: Sequence[tuple[str, Mapping[int, Sequence[float]]]],
                 crossover: int | None, title: str) -> Path:
    """Output tokens/s against concurrency per arm: the repeats' mean, a band from their
    lowest to highest value, each repeat as a dot; the crossover marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    for name, series in arms:
        levels = sorted(c for c, v in series.items() if v)
        if not levels:
            continue
        means = [sum(series[c]) / len(series[c]) for c in levels]
        lows = [min(series[c]) for c in levels]
        highs = [max(series[c]) for c in levels]
        (line,) = ax.plot(levels, means, marker="o", label=name)
        ax.fill_between(levels, lows, highs, alpha=0.2, color=line.get_color())
        for c in levels:
            ax.scatter([c] * len(series[c]), series[c], s=8, color=line.get_color(), alpha=0.6)
    if crossover is not None:
        ax.axvline(crossover, color="black", linestyle="--", linewidth=1)
        ax.annotate(f"crossover @{crossover}", (crossover, ax.get_ylim()[1]),
                    textcoords="offset points", xytext=(4, -14), fontsize=8)
    ax.set_xscale("log", base=2)
    levels_all = sorted({c for _, series in arms for c, v in series.items() if v})
    ax.set_xticks(levels_all, [str(c) for c in levels_all])
    ax.minorticks_off()
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return _save(plt, fig, path)


def advise_picture(path: Path, best_k: Sequence[int],
                   staircase: Mapping[int, Sequence[tuple[float, int]]], alpha: float,
                   predicted_vs_measured: Sequence[tuple[str, float, float]]) -> Path:
    """Left: best K per batch size. Middle: k*(alpha) per batch size with the measured alpha.
    Right: predicted against measured tokens/s."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), dpi=110)
    batches = list(range(1, len(best_k) + 1))
    axes[0].step(batches, best_k, where="mid")
    axes[0].set_xlabel("batch size (requests scheduled per step)")
    axes[0].set_ylabel("best K")
    axes[0].set_yticks(range(max(best_k, default=0) + 1))
    axes[0].set_title("best draft length per batch size", fontsize=10)
    axes[0].grid(True, alpha=0.3)
    for batch, steps in sorted(staircase.items()):
        xs: list[float] = []
        ys: list[int] = []
        for i, (a, k) in enumerate(steps):
            end = steps[i + 1][0] if i + 1 < len(steps) else 1.0
            xs += [a, end]
            ys += [k, k]
        axes[1].plot(xs, ys, label=f"B={batch}")
    axes[1].axvline(alpha, color="black", linestyle="--", linewidth=1)
    axes[1].set_xlabel("per-token acceptance alpha")
    axes[1].set_ylabel("best K")
    axes[1].set_yticks(range(max((k for steps in staircase.values() for _, k in steps),
                                 default=0) + 1))
    axes[1].set_title("the staircase (measured alpha dashed)", fontsize=10)
    axes[1].legend(fontsize=7)
    axes[1].grid(True, alpha=0.3)
    if predicted_vs_measured:
        pred = [p for _, p, _ in predicted_vs_measured]
        meas = [m for _, _, m in predicted_vs_measured]
        axes[2].scatter(meas, pred, s=14)
        top = max([*pred, *meas, 1.0]) * 1.05
        axes[2].plot([0, top], [0, top], color="grey", linewidth=1)
        for label, p, m in predicted_vs_measured:
            if math.isfinite(p) and math.isfinite(m):
                axes[2].annotate(label, (m, p), fontsize=6, alpha=0.7)
        axes[2].set_xlim(0, top)
        axes[2].set_ylim(0, top)
    axes[2].set_xlabel("measured tokens/s")
    axes[2].set_ylabel("predicted tokens/s")
    axes[2].set_title("predicted against measured", fontsize=10)
    axes[2].grid(True, alpha=0.3)
    fig.tight_layout()
    return _save(plt, fig, path)
