"""Charts worth sharing: ``specchat bench --plot FILE.svg`` (speedup against K per prompt, measured and predicted,
with the break-even line) and ``specchat models tune --plot FILE`` (v(K) per weight format), drawn with matplotlib
(the optional ``plot`` extra: ``pip install 'specchat[plot]'``), as SVG or PNG by the file's suffix.

The bench chart shows the exchange rate at a glance: per prompt, the measured speedup of every fixed K (median of
the pairs, min..max as an error bar) and of auto-K (a star at its mean K), the cost model's prediction over every
K (the replay of the rounds, as auto-K reads it: :mod:`specchat.bench.arithmetic`), the recommended K marked, and
the break-even line at 1.0x: above it speculation helps, below it it hurts. The caption names the target, the
drafter, the threads and the CPU, since the same pair helps on one CPU and hurts on another. Text stays text in
the SVG (``svg.fonttype = none``), so the chart can be searched and its series read back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specchat.bench.summary import SummaryRow
from specchat.errors import UserError

#: the file types a chart is written as
CHART_SUFFIXES = (".svg", ".png")


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UserError("--plot FILE needs matplotlib: pip install 'specchat[plot]' (or --plot alone for the terminal chart)") from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt

    return plt


def check_chart_path(text: str) -> Path:
    """``--plot FILE``: a .svg or .png path in a directory that exists; one line otherwise."""
    path = Path(text).expanduser()
    if path.suffix.lower() not in CHART_SUFFIXES:
        raise UserError(f"--plot {text}: the chart is written as .svg or .png; give a file name ending in one of them")
    if not path.parent.is_dir():
        raise UserError(f"--plot {text}: directory {path.parent} does not exist")
    return path


def _save(fig: Any, path: Path) -> Path:
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as exc:
        raise UserError(f"cannot write --plot {path}: {exc.strerror or exc}; choose a writable path") from None
    return path


def speedup_chart(path: Path, rows: Sequence[SummaryRow], arith: Mapping[str, Any] | None, caption: str) -> Path:
    """Speedup against K per prompt (see the module docstring) for one target's ``rows`` and its arithmetic."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    predicted = {p["prompt"]: p for p in (arith or {}).get("prompts", []) if p.get("curve")}
    prompts = list(dict.fromkeys(r.prompt for r in rows))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    k_top = max([int(r.k or 0) for r in rows if r.mode == "spec"] or [16])
    for i, prompt in enumerate(prompts):
        colour = colours[i % len(colours)]
        fixed = sorted((r for r in rows if r.prompt == prompt and r.mode == "spec" and r.speedup is not None),
                       key=lambda r: int(r.k or 0))
        if fixed:
            ks = [int(r.k or 0) for r in fixed]
            ys = [float(r.speedup or 0.0) for r in fixed]
            lo = [y - float(r.speedup_min if r.speedup_min is not None else y) for y, r in zip(ys, fixed)]
            hi = [float(r.speedup_max if r.speedup_max is not None else y) - y for y, r in zip(ys, fixed)]
            ax.errorbar([0, *ks], [1.0, *ys], yerr=[[0.0, *lo], [0.0, *hi]], fmt="o-", color=colour, capsize=3,
                        label=f"{prompt} measured")
        auto = next((r for r in rows if r.prompt == prompt and r.mode == "auto" and r.speedup is not None), None)
        if auto is not None:
            ax.plot([auto.k_mean], [auto.speedup], marker="*", markersize=14, color=colour, linestyle="none",
                    label=f"{prompt} auto-K (mean K {auto.k_mean:.1f})")
        entry = predicted.get(prompt)
        if entry is not None:
            curve = list(entry["curve"])[: k_top + 1]
            ax.plot(range(len(curve)), curve, linestyle="--", color=colour, alpha=0.7, label=f"{prompt} predicted")
            bk = int(entry.get("best_k") or 0)
            if 0 < bk < len(curve):
                ax.annotate(f"recommended K {bk}", (bk, curve[bk]), textcoords="offset points", xytext=(4, 6),
                            color=colour, fontsize=8)
    ax.axhline(1.0, color="black", linewidth=1.0)
    ax.text(0.2, 1.0, "break-even (1.0×): above it speculation helps, below it hurts", fontsize=8, va="bottom")
    ax.set_xlabel("K (draft tokens per round)")
    ax.set_ylabel("speedup × plain decoding (same target)")
    ax.set_title("When speculation helps and when it hurts")
    ax.legend(fontsize=7, ncol=2, loc="best")
    ax.grid(alpha=0.3)
    fig.text(0.01, -0.02, caption, fontsize=8, ha="left", va="top")
    out = _save(fig, path)
    plt.close(fig)
    return out


def verify_cost_chart(path: Path, variants: Sequence[tuple[str, Mapping[str, float]]], caption: str) -> Path:
    """v(K) per weight format (``variants``: (label, {"K": v})) against K, with v = K + 1 (row by row: batching
    saves nothing) and v = 1 (Leviathan et al.'s free verify) for reference."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    k_top = 1
    for label, v in variants:
        pts = sorted((int(k), float(x)) for k, x in v.items())
        if not pts:
            continue
        k_top = max(k_top, pts[-1][0])
        ax.plot([0, *(k for k, _ in pts)], [1.0, *(x for _, x in pts)], marker="o", label=label)
    ax.plot([0, k_top], [1, k_top + 1], linestyle=":", color="grey", label="K + 1 (row by row)")
    ax.axhline(1.0, linestyle="--", color="black", linewidth=0.8, label="1 (a free verify)")
    ax.set_xlabel("K (verify batch of K + 1 rows)")
    ax.set_ylabel("v(K) = t(K+1 rows) / t(1 row)")
    ax.set_title("What a verify batch costs, per weight format")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.text(0.01, -0.02, caption, fontsize=8, ha="left", va="top")
    out = _save(fig, path)
    plt.close(fig)
    return out


__all__ = ["CHART_SUFFIXES", "check_chart_path", "speedup_chart", "verify_cost_chart"]
