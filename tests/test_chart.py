"""``specchat bench --plot FILE.svg|.png`` and ``specchat models tune --plot FILE`` (issue 24): the charts are
written and hold their series (read back from the SVG's text, which stays text), not their pixels."""

from __future__ import annotations

import io
import json
import re

import pytest

import specchat.bench.command as bench_command
from specchat.bench.chart import verify_cost_chart
from specchat.cli import build_parser, main
from specchat.engine.build import this_cpu

pytestmark = pytest.mark.usefixtures("isolated_config")
COPY = "Repeat this line exactly, twice: the quick brown fox jumps over the lazy dog near the river bank."


def _bench(tmp_path, plot: str, *extra: str) -> tuple[int, str, str]:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([{"name": "copy-line", "prompt": COPY}]))
    argv = ["bench", "--draft", "ngram", "--suite", str(suite), "--threads", "1", "--n-predict", "24", "--no-progress",
            "--k", "0,4,8", "--runs", "1", "--auto", "--plot", plot, *extra]
    out, err = io.StringIO(), io.StringIO()
    rc = bench_command.main(build_parser().parse_args(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_the_bench_chart_of_the_bundled_model_holds_its_series(tmp_path):
    """A real bench of the bundled model with n-gram drafting: the SVG names the prompt's measured, predicted and
    auto-K series, the break-even line and the CPU; the PNG of the same is a PNG."""
    svg = tmp_path / "speedup.svg"
    rc, out, err = _bench(tmp_path, str(svg))
    assert rc == 0, err
    assert "wrote the chart of " in err and str(svg) in err
    text = svg.read_text(encoding="utf-8")
    for series in ("copy-line measured", "copy-line predicted", "copy-line auto-K (mean K", "break-even (1.0×)"):
        assert series in text, series
    assert this_cpu().split(" (flags")[0] in text and "specchat bench:" in text
    assert "K (draft tokens per round)" in text and "speedup × plain decoding" in text
    png = tmp_path / "speedup.png"
    rc, _, err = _bench(tmp_path, str(png), "--no-arithmetic")  # the measured series alone
    assert rc == 0, err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_the_verify_cost_chart_draws_every_format():
    """``models tune --plot``'s chart from a tune result's v(K) per variant (issue 20's AMD EPYC's, a Zen 5, from
    ``tests/data/cpu-profiles``): every format is a series, with the row-by-row and free-verify references."""
    import tempfile
    from pathlib import Path

    variants = [("Q4_1", {"1": 2.49, "4": 5.17, "16": 13.65, "64": 48.39}), ("F16", {"1": 1.0, "16": 2.88, "64": 8.51})]
    with tempfile.TemporaryDirectory() as d:
        path = verify_cost_chart(Path(d) / "v.svg", variants, "specchat models tune: bundled; CPU AMD EPYC")
        text = path.read_text(encoding="utf-8")
    assert all(label in text for label in ("Q4_1", "F16", "K + 1 (row by row)", "1 (a free verify)", "CPU AMD EPYC"))
    assert len(re.findall(r"<path", text)) > 10


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--plot", "chart.pdf"], "--plot chart.pdf: the chart is written as .svg or .png"),
        (["bench", "--plot", "/no/such/dir/c.svg"], "directory /no/such/dir does not exist"),
        (["models", "tune", "--plot", "v.jpeg"], "--plot v.jpeg: the chart is written as .svg or .png"),
    ],
)
def test_a_bad_chart_path_is_one_line(capsys, argv, message):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and message in err
