"""``specchat generate --server URL`` and ``specchat bench --server URL``: the same JSON fields as local runs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specchat.bench.runner import RECORD_FIELDS
from specchat.cli import main
from specchat.engine.events import Turn

from .conftest import SERVER_K

pytestmark = pytest.mark.usefixtures("isolated_config")

#: the keys of a local bench report's header (specchat.bench.command.main's meta) and its parts
BENCH_KEYS = {"specchat_bench", "interrupted", "target", "drafter", "ks", "auto", "runs", "n_predict", "temperature",
              "seed", "threads", "n_ctx", "suite", "records", "summary", "arithmetic"}


def test_generate_json_has_the_local_fields(capsys, self_draft_server):
    rc = main(["generate", "--server", self_draft_server.url, "--prompt", "Count from 1 to 5.", "--n-predict", "20",
               "--temperature", "0", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert set(data) == {f.name for f in dataclasses.fields(Turn)}  # a local run prints Turn.to_dict() too
    assert data["predicted_n"] == len(data["tokens"]) == len(data["kinds"]) == 20
    assert data["kinds"].count("accepted") == data["draft_n_accepted"] > 0
    assert data["k"] == SERVER_K and data["drafter"] == "server: draft-simple" and data["speculative"]
    assert "draft acceptance = 1.00000" in err and "no ghost text" in err


def test_generate_streams_coloured_text(capsys, self_draft_server):
    rc = main(["generate", "--server", self_draft_server.url, "--prompt", "Count from 1 to 5.", "--n-predict", "12",
               "--temperature", "0", "--color", "always"])
    out, _err = capsys.readouterr()
    assert rc == 0
    assert "\x1b[32m" in out and "\x1b[34;1m" in out  # accepted and bonus colours


def test_server_url_from_the_environment(capsys, monkeypatch, self_draft_server):
    monkeypatch.setenv("SPECCHAT_SERVER_URL", self_draft_server.url)
    rc = main(["generate", "--prompt", "Hi", "--n-predict", "4", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["drafter"].startswith("server")


@pytest.mark.parametrize("flag", [["--k", "2"], ["--draft", "ngram"], ["--target", "bundled"], ["--auto-k"],
                                  ["--threads", "2"], ["--n-ctx", "512"]])
def test_generate_refuses_local_flags_with_a_server(capsys, flag):
    rc = main(["generate", "--server", "http://127.0.0.1:9", "--prompt", "hi", *flag])
    _out, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert f"{flag[0]} does not apply to a llama-server" in err


def test_bench_json_has_the_local_fields(capsys, tmp_path, self_draft_server):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([{"name": "count", "prompt": "Count from 1 to 8."}]))
    report = tmp_path / "bench.json"
    rc = main(["bench", "--server", self_draft_server.url, "--suite", str(suite), "--runs", "2", "--n-predict", "16",
               "--json", str(report), "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(report.read_text())
    assert set(data) == BENCH_KEYS
    assert data["ks"] == [SERVER_K] and data["drafter"] == "server: draft-simple" and data["arithmetic"] is None
    assert len(data["records"]) == 2
    for record in data["records"]:
        assert set(record) == set(RECORD_FIELDS)
        assert record["mode"] == "spec" and record["k"] == SERVER_K and record["speedup"] is None
        assert record["draft_n_accepted"] == record["draft_n"] > 0 and record["rejections"] == 0
        # every run processed its whole prompt: the server's prompt cache is off for the bench
        assert record["prompt_n"] > 5
    assert data["summary"][0]["acceptance"] == 1.0 and "count" in out


def test_bench_refuses_k_with_a_server(capsys):
    rc = main(["bench", "--server", "http://127.0.0.1:9", "--k", "1,2"])
    _out, err = capsys.readouterr()
    assert rc == 2 and "--k does not apply to a llama-server" in err
