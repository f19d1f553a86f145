"""Issue 12's goals, read from one ``specchat bench --formats ... --auto --json FILE`` report.

Not a test and not a benchmark: it reads the medians the bench wrote (its ``summary`` rows) and says, goal by
goal, what they are and whether they meet the issue's bar:

1. copy-heavy, n-gram, auto-K on the best format: ≥ 2.0× the reference (bundled Q4_1) baseline, and ≥ 1.9×
   that format's own baseline (its adjacent pairs);
2. code and prose: the best setup the run measured (any format, plain or auto-K) never below 0.97× the
   reference baseline;
3. auto-K ≥ 0.95× the best fixed K, on every prompt, for every format that speculated.

``x`` figures are the bench's ``x_reference`` (each run's tok/s / the same round's reference baseline run,
median over rounds); "own" figures are its ``speedup`` (median over adjacent baseline/speculative pairs).
Usage::

    python scripts/issue12_goals.py goals.json
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

COPY_X, COPY_OWN, PLAIN_FLOOR, AUTO_VS_FIXED = 2.0, 1.9, 0.97, 0.95


def check(report: dict[str, Any]) -> list[tuple[bool, str]]:
    """(met, one line) per goal and case, in the order above."""
    rows = [r for r in report["summary"] if r.get("x_reference") is not None]
    one_row = {f["label"] for f in report.get("formats", []) if f.get("one_row")}
    out: list[tuple[bool, str]] = []

    def x(r: dict[str, Any]) -> float:
        return float(r["x_reference"])

    copy = [r for r in rows if r["prompt"] == "copy-heavy" and r["mode"] == "auto"]
    if copy:
        best = max(copy, key=x)
        own = best.get("speedup")
        ok = x(best) >= COPY_X and own is not None and own >= COPY_OWN
        out.append((ok, f"copy-heavy auto-K on {best['target']}: {x(best):.2f}x the reference baseline (goal {COPY_X}), "
                        f"{own if own is None else round(own, 2)}x its own (goal {COPY_OWN})"))
    else:
        out.append((False, "copy-heavy auto-K: not in this report (run the bench with --auto on the default suite)"))
    for prompt in ("code", "prose"):
        mine = [r for r in rows if r["prompt"] == prompt and r["mode"] in ("baseline", "auto")]
        if not mine:
            out.append((False, f"{prompt}: not in this report"))
            continue
        best = max(mine, key=x)
        what = "plain" if best["mode"] == "baseline" else "auto-K"
        out.append((x(best) >= PLAIN_FLOOR, f"{prompt}: best setup {best['target']} {what} {x(best):.2f}x the reference "
                                            f"baseline (goal >= {PLAIN_FLOOR})"))
    for prompt in dict.fromkeys(r["prompt"] for r in rows):
        for target in dict.fromkeys(r["target"] for r in rows):
            if target in one_row:
                continue
            auto = [r for r in rows if r["prompt"] == prompt and r["target"] == target and r["mode"] == "auto"]
            fixed = [r for r in rows if r["prompt"] == prompt and r["target"] == target and r["mode"] == "spec"]
            if not auto or not fixed:
                continue
            top = max(fixed, key=x)
            ratio = x(auto[0]) / x(top)
            out.append((ratio >= AUTO_VS_FIXED, f"{prompt} {target}: auto-K {x(auto[0]):.2f}x vs best fixed K={top['k']} "
                                                f"{x(top):.2f}x = {ratio:.2f} (goal >= {AUTO_VS_FIXED})"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="the JSON file written by specchat bench --json")
    args = ap.parse_args(argv)
    try:
        with open(args.report, encoding="utf-8") as f:
            report = json.load(f)
        results = check(report)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"issue12_goals: {args.report} is not a readable specchat bench report ({exc}); write one with "
              "specchat bench --formats F16,Q8_0 --auto --json FILE", file=sys.stderr)
        return 2
    for ok, line in results:
        print(f"{'met ' if ok else 'MISS'} {line}")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
