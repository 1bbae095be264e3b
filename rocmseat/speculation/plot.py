"""Pictures of the gate and the advisor, rendered by matplotlib (Agg backend, no display).

matplotlib is optional (the `spec` extra): without it `PlotUnavailable` says so and the caller
reports it; nothing else depends on a picture.
"""

from __future__ import annotations

import importlib
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmseat.atomic import write_into
from rocmseat.errors import RocmseatError

if TYPE_CHECKING:
    from rocmseat.speculation.advise.basis import Decision


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


def _log2_ticks(ax: Any, levels: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(levels), [str(c) for c in levels])
    ax.minorticks_off()


def _save(fig: Any, path: Path) -> Path:
    """The figure as PNG bytes, written by the one writer into a handed directory (a link or
    a FIFO at the name is refused; savefig itself would follow the link or block on the FIFO).
    WriteRefused when it cannot be written."""
    plt = _pyplot()
    fig.tight_layout()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png")
    finally:
        plt.close(fig)
    return write_into(path.parent, path.name, buffer.getvalue())


def gate_picture(path: Path, arms: Sequence[tuple[str, Mapping[int, Sequence[float]]]],
                 ratios: Sequence[RatioSeries], threshold: float) -> Path:
    """Top: candidate / base against concurrency per compared arm, its 95 % band, the gate's
    threshold, the crossover and each comparison's verdict in the legend. Bottom: output
    tokens/s per arm (the repeats' mean, their range as a band, each repeat a dot)."""
    plt = _pyplot()
    verdicts = "\n".join(
        f"{r.arm}: {r.verdict}" + (f"; crossover @{r.crossover}" if r.crossover is not None
                                   else f"; no crossover up to {max(r.points)}" if r.points
                                   else "")
        for r in ratios)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {name: colours[i % len(colours)] for i, (name, _) in enumerate(arms)}
    levels_all = sorted({c for _, series in arms for c, v in series.items() if v})
    if any(r.points for r in ratios):
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 7.2), dpi=120, sharex=True,
                                          gridspec_kw={"height_ratios": [3, 2]})
        _ratio_panel(top, ratios, colour, threshold, verdicts)
    else:  # an A/A run judges no crossover: no ratio to draw, and no empty panel
        fig, bottom = plt.subplots(figsize=(7.5, 4.8), dpi=120)
        bottom.set_title(f"output tokens/s per arm (no ratio panel: an A/A run judges no "
                         f"crossover)\n{verdicts}", fontsize=9)
    for name, series in arms:
        levels = sorted(c for c, v in series.items() if v)
        if not levels:
            continue
        means = [sum(series[c]) / len(series[c]) for c in levels]
        (line,) = bottom.plot(levels, means, marker="o", label=name, color=colour[name])
        bottom.fill_between(levels, [min(series[c]) for c in levels],
                            [max(series[c]) for c in levels], alpha=0.2, color=line.get_color())
        for c in levels:
            bottom.scatter([c] * len(series[c]), series[c], s=8, color=line.get_color(),
                           alpha=0.6)
    _log2_ticks(bottom, levels_all)
    bottom.set_xlabel("concurrency (requests in flight)")
    bottom.set_ylabel("output tokens/s")
    bottom.grid(True, alpha=0.3)
    bottom.legend(fontsize=7)
    return _save(fig, path)


def _ratio_panel(top: Any, ratios: Sequence[RatioSeries], colour: Mapping[str, str],
                 threshold: float, verdicts: str) -> None:
    crossings: dict[int, list[str]] = {}
    for r in ratios:
        levels = sorted(r.points)
        if not levels:
            continue
        c = colour.get(r.arm, "black")
        top.plot(levels, [r.points[x][0] for x in levels], marker="o", color=c,
                 label=f"{r.arm} / base")
        top.fill_between(levels, [r.points[x][1] for x in levels],
                         [r.points[x][2] for x in levels], color=c, alpha=0.18)
        if r.crossover is not None:
            crossings.setdefault(r.crossover, []).append(r.arm)
    for at, names in sorted(crossings.items()):  # one line and one legend entry per level
        top.axvline(at, color="grey", linestyle=":", linewidth=1.4,
                    label=f"crossover @{at}: {', '.join(names)}")
    top.axhline(1.0, color="black", linewidth=1)
    top.axhline(threshold, color="tab:red", linestyle="--", linewidth=1,
                label=f"gate: aggregate >= {threshold:g}x base")
    top.set_ylabel("candidate / base (output tokens/s)")
    top.set_title(f"does the candidate pay, up to which load? (band: 95 %)\n{verdicts}",
                  fontsize=9)
    top.grid(True, alpha=0.3)
    top.legend(fontsize=7, loc="best")


@dataclass(frozen=True, slots=True)
class RatioSeries:
    """One comparison for the picture: concurrency -> (ratio, low, high) against the base."""

    arm: str
    verdict: str
    points: Mapping[int, tuple[float, float, float]]
    crossover: int | None


# basis -> (hatch, alpha, edge line style): measured solid, model hatched, extrapolated dotted
_BASIS_STYLE: dict[str, tuple[str | None, float, str]] = {
    "measured": (None, 0.55, "-"), "model": ("//", 0.25, "--"), "extrapolated": ("xx", 0.15, ":")}


def advise_picture(path: Path, decision: Decision, source: str, headline: str = "") -> Path:  # noqa: PLR0915
    """Left: the proposed K per batch size, each tier drawn by its basis (measured solid,
    model hatched, extrapolated cross-hatched and dotted), the model's own staircase where the
    measurements changed it. Middle: k*(alpha) per batch size with the measured alpha.
    Right (when arms were measured): the model check, measured / predicted per arm."""
    plt = _pyplot()
    ticker = importlib.import_module("matplotlib.ticker")
    obs = decision.observations
    panels = 3 if obs else 2
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 4.4), dpi=110)
    advice = decision.advice
    ax = axes[0]
    shown: set[str] = set()
    for t in decision.tiers:
        if t.tie:
            # a tie proposes nothing: the seat's K stays (rocmseat.speculation.advise.ties)
            label = "tie: the seat's K kept"
            ax.bar(t.start - 0.5, advice.best_k[t.start - 1], width=t.end - t.start + 1,
                   align="edge", color=(0.5, 0.5, 0.5, 0.25), edgecolor="tab:gray",
                   linewidth=1.2, label=None if label in shown else label)
            shown.add(label)
            continue
        hatch, alpha, linestyle = _BASIS_STYLE[t.basis]
        ax.bar(t.start - 0.5, t.k, width=t.end - t.start + 1, align="edge",
               color=(0.12, 0.47, 0.71, alpha), hatch=hatch, edgecolor="tab:blue",
               linestyle=linestyle, linewidth=1.2,
               label=None if t.basis in shown else t.basis)
        shown.add(t.basis)
    if decision.free.best_k != advice.best_k:
        batches = list(range(1, len(decision.free.best_k) + 1))
        ax.step(batches, decision.free.best_k, where="mid", color="tab:red", linewidth=1.6,
                linestyle="--", label="the model alone (not proposed)")
    ran = sorted({(o.batch, o.k) for o in obs if o.drafter and o.batch <= len(advice.best_k)})
    if ran:
        ax.scatter([b for b, _ in ran], [k for _, k in ran], marker="o", color="black", s=18,
                   zorder=3, label="a gate arm ran (batch, K)")
    top_k = max([*advice.best_k, *decision.free.best_k, *(k for _, k in ran), 1])
    ax.set_ylim(-0.2, top_k + 0.8)
    ax.set_xlim(0.5, len(advice.best_k) + 0.5)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlabel("batch size (requests scheduled per step)")
    ax.set_ylabel("proposed K")
    ax.set_title("proposal per batch size, by basis", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    ax = axes[1]
    for batch, steps in sorted(advice.staircase.items()):
        xs: list[float] = []
        ys: list[int] = []
        for i, step in enumerate(steps):
            end = steps[i + 1].alpha_from if i + 1 < len(steps) else 1.0
            xs += [step.alpha_from, end]
            ys += [step.k, step.k]
        ax.plot(xs, ys, label=f"B={batch}")
    ax.axvline(advice.alpha, color="black", linestyle="--", linewidth=1)
    ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlabel("per-token acceptance alpha")
    ax.set_ylabel("best K")
    ax.set_title("the staircase (measured alpha dashed)", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    if obs:
        ax = axes[2]
        arms = sorted({o.arm for o in obs}, key=lambda a: (a != "base", a))
        for arm in arms:
            mine = sorted((o for o in obs if o.arm == arm and math.isfinite(o.miss)),
                          key=lambda o: o.batch)
            ks = sorted({o.k for o in mine})
            ax.errorbar([o.batch for o in mine], [1.0 + o.miss for o in mine],
                        yerr=[o.noise * (1.0 + o.miss) for o in mine], marker="o", capsize=3,
                        label=f"{arm} (K={','.join(str(k) for k in ks)})")
        ax.axhline(1.0, color="black", linewidth=1)
        _log2_ticks(ax, sorted({o.batch for o in obs}))
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("measured / predicted tokens/s")
        error = decision.model_error
        ax.set_title("model check" + ("" if error is None else f" (RMS miss {error:.0%})"),
                     fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    else:
        fig.text(0.5, 0.005, f"no model-check panel: the {source} source has no measured arms "
                 "to check the model against (a gate directory has)", ha="center", fontsize=7)
    if headline:
        # the one answer of gate and advisor (rocmseat.speculation.advise.verdict) over the panels
        fig.suptitle(headline, fontsize=9, color="tab:red" if "do not ship" in headline.lower()
                     else "black")
    return _save(fig, path)
