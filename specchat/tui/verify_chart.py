"""The target's verify cost v(K) drawn as text: the sidebar's "verify cost" block and the F1 help's curve.

v(K) = time of a (K+1)-row verify batch / time of one single-row decode (:class:`~specchat.engine.events.
VerifyCurve`, fitted by :mod:`specchat.engine.telemetry.verify_cost`). It is the divisor of the speedup
E(α, K) / (c·K + v(K)) (Leviathan et al. 2023), so it is what the break-even line is made of: a flat curve (a
format with a batched kernel) lets long drafts pay, a steep one (the bundled Q4_1, no batched kernel on this
CPU) makes every drafted token cost most of a target decode (README, "The lesson", has this machine's
figures).

One row per K in :data:`CHART_KS` up to the drafter's cap (plus the current K, marked): v itself, the K+1
rows it verifies, and a bar of v out of those K+1 (``11 of 17``: 65 % filled). A full bar is a batch that costs
as much as decoding its rows one by one (batching saves nothing); a short one, a batch that shares the
weight reads. So a flat curve reads as bars that shrink with K, a steep one as bars that stay long, and two
formats' charts compare at a glance (a bar scaled to the largest v shown would draw every curve as the same
ramp). The
text depends only on v rounded as :func:`v_text` shows it (one decimal below 10, whole rows above, as the
engine's reason line writes it), so a curve that moves by less than that between rounds draws the same text
and the sidebar, which skips unchanged text, does not redraw it (issue 9: the UI thread's CPU is taken from
the engine on a 2-core machine).

Pure functions of :mod:`specchat.engine.events` types: no Textual, no numpy.
"""

from __future__ import annotations

from specchat.engine.events import VerifyCurve, VerifySource

#: the K values charted (the calibration times 2/3/5/9/17/33/65-row batches, i.e. these K)
CHART_KS = (1, 2, 4, 8, 16, 32, 64)
#: bar columns: "K 64 " + bar + " 40 of 65" + " ◂" stays within the sidebar's 32 text columns
BAR_WIDTH = 12
#: left-aligned eighth blocks, index = eighths filled
EIGHTHS = " \u258f\u258e\u258d\u258c\u258b\u258a\u2589\u2588"
MARK = "\u25c2"
#: where the curve came from, in words
SOURCE_WORDS: dict[VerifySource, str] = {
    "prior": "not measured yet",
    "cache": "cached calibration",
    "measured": "measured this session",
}


def v_text(v: float) -> str:
    """v as the chart writes it: one decimal below 10 single-row decodes, whole ones from there."""
    return f"{v:.1f}" if v < 9.95 else f"{v:.0f}"


def chart_ks(cap: int, current: int | None = None) -> tuple[int, ...]:
    """The K values to chart: :data:`CHART_KS` up to ``cap`` (the drafter's cap), the cap itself, and
    ``current`` (clamped to the cap), in order."""
    cap = max(1, cap)
    ks = {k for k in CHART_KS if k <= cap} | {cap}
    if current is not None and current > 0:
        ks.add(min(current, cap))
    return tuple(sorted(ks))


def _bar(value: float, top: float) -> str:
    """``value`` out of ``top`` in :data:`BAR_WIDTH` columns of eighth blocks (at least one eighth)."""
    eighths = max(1, round(value / top * BAR_WIDTH * 8)) if top > 0 else 0
    full, part = divmod(min(eighths, BAR_WIDTH * 8), 8)
    return ("\u2588" * full + (EIGHTHS[part] if part else "")).ljust(BAR_WIDTH)


def chart_rows(curve: VerifyCurve, cap: int, current: int | None = None) -> list[str]:
    """One row per K of :func:`chart_ks`: ``K 16 ████▉        7.0 of 17`` (◂ on the current K), each bar v out
    of K+1 rows, drawn from v as written (:func:`v_text`), so the text changes only when a written value does."""
    ks = chart_ks(cap, current)
    shown = {k: v_text(curve.at(k)) for k in ks}
    marked = None if current is None or current <= 0 else min(current, max(1, cap))
    rows = []
    for k in ks:
        row = f"K{k:>3} {_bar(float(shown[k]), k + 1)} {shown[k]:>4} of {k + 1}"
        rows.append(f"{row} {MARK}" if k == marked else row)
    return rows


def headline(curve: VerifyCurve, rows_shown: int = 0) -> str:
    """What the curve is: the weight format and where v(K) came from (and, when the chart goes past the
    largest batch timed, that v is extrapolated beyond it)."""
    line = f"verify cost v(K) \u00b7 {curve.weights or 'target'}, {SOURCE_WORDS[curve.source]}"
    if curve.source != "prior" and 0 < curve.measured_rows < rows_shown:
        line += f"; timed up to {curve.measured_rows} rows, extrapolated past"
    return line


def verify_block(curve: VerifyCurve, cap: int, current: int | None = None) -> tuple[str, str, str]:
    """(headline, chart, reason) of a curve; the chart is empty while nothing is measured (the prior's v = 1
    is an assumption, not a curve to draw: the reason line says so)."""
    if curve.source == "prior":
        return headline(curve), "", curve.reason
    ks = chart_ks(cap, current)
    return headline(curve, ks[-1] + 1), "\n".join(chart_rows(curve, cap, current)), curve.reason


__all__ = ["BAR_WIDTH", "CHART_KS", "SOURCE_WORDS", "chart_ks", "chart_rows", "headline", "v_text", "verify_block"]
