"""scripts/issue12_goals.py reads issue 12's goals out of a bench report: on a report shaped like
``specchat bench --formats F16,Q8_0 --auto --json`` writes (summary rows with x_reference and speedup), each
goal is met or missed by its bar, the one-row-kernel variant (baselines only) is left out of the auto-K check,
and a file that is not such a report is one line on stderr, exit 2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "issue12_goals.py"
spec = importlib.util.spec_from_file_location("issue12_goals", SCRIPT)
assert spec is not None and spec.loader is not None
goals = importlib.util.module_from_spec(spec)
spec.loader.exec_module(goals)


def row(prompt: str, target: str, mode: str, k: int | None, x: float, own: float | None = None) -> dict:
    return {"prompt": prompt, "target": target, "mode": mode, "k": k, "x_reference": x, "speedup": own}


def report(copy_auto_x: float, copy_auto_own: float, prose_best: float, code_auto: float) -> dict:
    summary = [
        row("copy-heavy", "Q4_1", "baseline", 0, 1.0, 1.0),
        row("copy-heavy", "Q8_0", "spec", 16, copy_auto_x - 0.05, copy_auto_own - 0.05),
        row("copy-heavy", "Q8_0", "auto", None, copy_auto_x, copy_auto_own),
        row("code", "Q4_1", "baseline", 0, 1.0, 1.0),
        row("code", "Q8_0", "spec", 4, 1.2, 1.2),
        row("code", "Q8_0", "auto", None, code_auto, code_auto),
        row("prose", "Q4_1", "baseline", 0, prose_best, 1.0),
        row("prose", "Q4_1 one-row", "baseline", 0, 0.5, 1.0),
    ]
    formats = [{"label": "Q4_1", "one_row": False}, {"label": "Q8_0", "one_row": False},
               {"label": "Q4_1 one-row", "one_row": True}]
    return {"summary": summary, "formats": formats}


def test_every_goal_is_met_or_missed_by_its_bar(tmp_path, capsys):
    good = goals.check(report(2.1, 1.95, 1.0, 1.2))
    assert all(ok for ok, _ in good), good
    lines = [line for _, line in good]
    assert lines[0].startswith("copy-heavy auto-K on Q8_0: 2.10x the reference baseline")
    assert any(line.startswith("code: best setup Q8_0 auto-K 1.20x") for line in lines)
    assert not any("one-row" in line and "auto-K" in line for line in lines)  # baselines only: not auto-K's case
    # own speedup 1.85 < 1.9; prose's best 0.96 < 0.97; code's auto-K 1.1 / its K=4's 1.2 = 0.92 < 0.95
    missed = [line for ok, line in goals.check(report(2.1, 1.85, 0.96, 1.1)) if not ok]
    assert [m.split(":")[0] for m in missed] == ["copy-heavy auto-K on Q8_0", "prose", "code Q8_0"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report(2.1, 1.95, 1.0, 1.2)))
    assert goals.main([str(path)]) == 0
    path.write_text(json.dumps(report(1.5, 1.95, 1.0, 1.2)))
    assert goals.main([str(path)]) == 1
    assert "MISS copy-heavy auto-K on Q8_0: 1.50x" in capsys.readouterr().out


def test_a_file_that_is_no_bench_report_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "nope.json"
    path.write_text('{"records": []}')
    assert goals.main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is not a readable specchat bench report" in err and "--json FILE" in err
