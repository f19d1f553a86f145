"""The target's verify cost in the sidebar of the real app on a real GGUF, through a real pty (issue 12).

The installed ``specchat`` on the tiny generated F32 target (tests/conftest.py) with the n-gram drafter and
auto-K, ``--threads 1``, in a fresh data dir (no cached calibration): before the first reply the sidebar's
"verify cost" block says v(K) is not measured yet; after a reply (auto-K times the verify batches first) it
says "measured this session", draws one row per K up to the n-gram drafter's cap, and states the engine's
reason in words ("F32: …; verifying 17 rows costs … rows"). The terminal is tall so the block, which sits
under the break-even line, is on screen without scrolling the sidebar.
"""

from __future__ import annotations

import re
from pathlib import Path

from ptyapp import PtyApp

from specchat.tui.verify_chart import chart_ks

COLS, ROWS = 110, 100
BORDER = "\u258f"  # the sidebar's left border (vkey); the chart's 1/8 block too, so split at the first one


def sidebar_text(app: PtyApp) -> str:
    """The sidebar's column of the screen, as one line of words (wrapped lines joined)."""
    parts = [line.split(BORDER, 1)[1] for line in app.lines() if BORDER in line]
    return " ".join(" ".join(parts).split())


def sidebar_lines(app: PtyApp) -> list[str]:
    return [line.split(BORDER, 1)[1].strip() for line in app.lines() if BORDER in line]


def test_the_sidebar_states_the_real_targets_verify_cost_and_its_reason_after_a_reply(tmp_path: Path,
                                                                                      tiny_target: Path) -> None:
    args = ["--target", str(tiny_target), "--draft", "ngram", "--n-predict", "24"]
    with PtyApp(tmp_path, args, cols=COLS, rows=ROWS) as app:
        app.wait_ready(timeout=180)
        app.wait_for(lambda s: "not measured yet" in sidebar_text(app), timeout=60, what="the prior's block")
        before = sidebar_text(app)
        assert "verify cost v(K) \u00b7 F32, not measured yet" in before, before
        assert "F32: verify cost not measured yet (v = 1 assumed until the first timings)" in before
        assert not any(line.startswith("K 16 ") for line in sidebar_lines(app))  # nothing drawn from v = 1
        app.write("Repeat exactly: one two three four. one two three four.\r")
        reason = re.compile(r"F32: [^;]+; verifying 17 rows costs [0-9.]+ rows")
        app.wait_for(lambda s: "measured this session" in sidebar_text(app) and reason.search(sidebar_text(app))
                     and "tok/s of the last reply" in sidebar_text(app), timeout=180, what="the measured curve")
        after = sidebar_text(app)
        assert "verify cost v(K) \u00b7 F32, measured this session" in after, after
        rows = [line for line in sidebar_lines(app) if re.fullmatch(r"K\s*\d+ .* [0-9.]+ of \d+( \u25c2)?", line)]
        shown = [int(line.split()[1]) for line in rows]
        assert [k for k in chart_ks(64) if k in shown] == list(chart_ks(64)), rows  # the n-gram cap: up to 64
        for line in rows:
            k, v, rows_n = re.fullmatch(r"K\s*(\d+) .* ([0-9.]+) of (\d+)( \u25c2)?", line).groups()[:3]
            assert int(rows_n) == int(k) + 1 and float(v) >= 1.0, line
        print("\n".join(sidebar_lines(app)))  # the block as drawn, for a reader of the log (-s)
        assert app.quit() == 0
