"""``specchat generate`` end to end: streamed text, --json fields, the acceptance line, baseline modes,
and every bad-input path (one line on stderr, exit code 2, no traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.cli import main
from specchat.engine.drafter_kinds import K_MAX

TURN_FIELDS = {
    "prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second", "draft_n",
    "draft_n_accepted", "acceptance", "mean_len", "accepted_per_pos", "draft_ms_per_step",
    "verify_ms_per_step", "overhead_ms", "text", "tokens", "kinds",
}


pytestmark = pytest.mark.usefixtures("isolated_config")


def run_json(capsys, *args) -> tuple[dict, str]:
    rc = main(["generate", "--json", *args])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out), err


def test_json_has_every_turn_field_and_the_acceptance_line(capsys, tiny_pair):
    target, draft = tiny_pair
    data, err = run_json(capsys, "--prompt", "Hello there", "--target", str(target), "--draft", str(draft),
                         "--k", "4", "--n-predict", "20", "--raw")
    assert TURN_FIELDS <= data.keys()
    assert data["predicted_n"] == len(data["tokens"]) == len(data["kinds"]) > 0
    assert data["draft_n"] > 0
    assert set(data["kinds"]) <= {"accepted", "corrected", "bonus", "plain"}
    line = next(x for x in err.splitlines() if x.startswith("draft acceptance = "))
    assert f"{data['draft_n_accepted']:5d} accepted / {data['draft_n']:5d} generated" in line
    assert f"mean len = {data['mean_len']:5.2f}" in line


@pytest.mark.parametrize("baseline", [["--draft", "none"], ["--k", "0"]])
def test_baseline_modes_draft_nothing_and_give_the_same_greedy_text(capsys, tiny_pair, baseline):
    target, draft = tiny_pair
    common = ["--prompt", "Once upon a time", "--target", str(target), "--n-predict", "24", "--raw"]
    base, _ = run_json(capsys, *common, *baseline)
    spec, _ = run_json(capsys, *common, "--draft", str(draft), "--k", "3")
    assert base["draft_n"] == 0 and set(base["kinds"]) == {"plain"}
    # issue 11: nothing was drafted, so no K was used and there is no acceptance (it said k: 3, acceptance: 0.0)
    assert base["k"] == 0 and base["acceptance"] is None and base["k_max"] == 0
    assert spec["tokens"] == base["tokens"]
    assert spec["k"] == 3 and spec["acceptance"] is not None


def test_a_bare_preset_name_is_one_line_naming_both_spellings(capsys):
    assert main(["generate", "--prompt", "hi", "--target", "smollm2-f16-q41"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "preset:smollm2-f16-q41" in err and "'SmolLM2-135M-Instruct.F16'" in err


def test_ngram_default_streams_plain_text_to_a_pipe(tiny_target):
    """Not a terminal: no colour codes, no ghost text; exactly the reply on stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "specchat.cli", "generate", "--prompt", "a b a b a b a b", "--raw",
         "--target", str(tiny_target), "--n-predict", "16", "--threads", "1"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "SPECCHAT_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout
    assert "draft acceptance = " in proc.stderr
    assert proc.stdout.strip()


def test_color_always_marks_kinds(capsys, tiny_pair):
    target, draft = tiny_pair
    rc = main(["generate", "--prompt", "The quick brown fox", "--raw", "--target", str(target), "--draft",
               str(draft), "--k", "4", "--n-predict", "30", "--color", "always"])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert "\x1b[32m" in out  # accepted drafts in green


def test_system_prompt_and_conversation_file(capsys, tiny_pair, tmp_path):
    target, draft = tiny_pair
    first, _ = run_json(capsys, "--prompt", "Hi", "--system", "Be brief.", "--target", str(target),
                        "--draft", str(draft), "--n-predict", "8")
    from specchat.engine.protocol import Message
    from specchat.history import export_messages

    conv = export_messages([
        Message("system", "Be brief."),
        Message("user", "Hi"),
        Message("assistant", first["text"], tokens=first["tokens"], kinds=first["kinds"]),
    ])
    f = tmp_path / "conv.json"
    f.write_text(json.dumps(conv))
    second, _ = run_json(capsys, "--prompt", "More", "--conversation", str(f), "--target", str(target),
                         "--draft", str(draft), "--n-predict", "8")
    assert second["prompt_n"] > first["prompt_n"]  # the whole saved conversation was decoded
    assert json.loads(f.read_text()) == conv  # the saved file is untouched


BAD = [
    (["--k", str(K_MAX + 1)], f"K must be 0..{K_MAX}"),
    (["--k", "-1"], f"K must be 0..{K_MAX}"),
    (["--n-predict", "0"], "--n-predict"),
    (["--target", "/nonexistent/model.gguf"], "/nonexistent/model.gguf"),
    (["--draft", "/nonexistent/draft.gguf"], "/nonexistent/draft.gguf"),
    (["--temperature", "-1"], "temperature"),
]


@pytest.mark.parametrize("extra,needle", BAD)
def test_bad_input_is_one_line_exit_2(capsys, tiny_target, extra, needle):
    args = ["generate", "--prompt", "x", "--target", str(tiny_target), *extra]
    rc = main(args)
    out, err = capsys.readouterr()
    assert rc == 2
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert needle in lines[0] and "Traceback" not in err


def test_not_gguf_and_truncated_files_are_refused(capsys, tmp_path, tiny_target):
    text = tmp_path / "notes.gguf"
    text.write_text("this is not a model\n")
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(Path(tiny_target).read_bytes()[:-1000])
    for path, needle in ((text, "GGUF"), (trunc, "truncated")):
        rc = main(["generate", "--prompt", "x", "--target", str(path)])
        _, err = capsys.readouterr()
        assert rc == 2 and needle in err and str(path) in err and len(err.strip().splitlines()) == 1


def test_incompatible_draft_names_the_rule(capsys, tiny_target, make_tiny_gguf):
    other = make_tiny_gguf(seed=5, n_vocab_pad=300, name="padded")
    rc = main(["generate", "--prompt", "x", "--target", str(tiny_target), "--draft", str(other)])
    _, err = capsys.readouterr()
    assert rc == 2 and "vocab size" in err and len(err.strip().splitlines()) == 1


def test_subprocess_error_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "specchat.cli", "generate", "--prompt", "x", "--k", str(K_MAX + 1)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("specchat: error:")


def test_peak_memory_stays_within_weights_plus_kv_plus_250_mb(bundled_model):
    """No n_ctx x n_vocab logits buffer: peak RSS <= weights + F16 KV cache + 250 MB."""
    from specchat.engine.gguf import read_gguf_info

    code = (
        "import sys\n"
        "from specchat.cli import main\n"
        "rc = main(['generate', '--prompt', 'Write a haiku about the sea.', '--n-predict', '64', '--json',"
        " '--n-ctx', '4096', '--threads', '1'])\n"
        # VmHWM is this process's own peak (ru_maxrss would carry the forking pytest's peak across exec)
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
        "print(hwm, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    peak_kb = int(proc.stderr.strip().splitlines()[-1])
    info = read_gguf_info(bundled_model)
    meta = info.metadata
    n_layer = int(meta["llama.block_count"])
    n_embd = int(meta["llama.embedding_length"])
    kv_dim = n_embd * int(meta["llama.attention.head_count_kv"]) // int(meta["llama.attention.head_count"])
    kv_bytes = 4096 * n_layer * 2 * kv_dim * 2
    budget = info.file_size + kv_bytes + 250 * 2**20
    assert peak_kb * 1024 <= budget, f"peak RSS {peak_kb / 1024:.0f} MB > budget {budget / 2**20:.0f} MB"
    # an n_ctx x n_vocab float32 logits buffer alone would be 4096 * 49152 * 4 bytes = 768 MB


def test_a_model_drafters_k_above_its_cap_is_said_in_one_line(capsys, tiny_pair):
    """``--draft MODEL --k 40`` runs at a model drafter's cap (16): one line on stderr says so (not silently);
    the n-gram drafter's cap is 64, so its K 40 is said nothing of, and auto-K chooses within the cap itself."""
    target, draft = tiny_pair
    common = ["--prompt", "Hello there", "--target", str(target), "--n-predict", "24", "--raw"]
    data, err = run_json(capsys, *common, "--draft", str(draft), "--k", "40")
    notes = [line for line in err.splitlines() if "cap" in line]
    assert notes == ["specchat: note: K 40 is above a model drafter's cap of 16: its rounds draft at most 16 tokens"]
    assert data["draft_n"] > 0 and data["k_max"] <= 16
    _, err = run_json(capsys, *common, "--draft", "ngram", "--k", "40")
    assert "cap" not in err
    _, err = run_json(capsys, *common, "--draft", str(draft), "--k", "16")
    assert "cap" not in err


def test_auto_k_says_on_stderr_while_it_times_v_k_once(capsys, tiny_target):
    """With auto-K the first reply of a model waits for v(K) to be timed (seconds on a real model): ``generate``
    says so on stderr, as the app's sidebar does; the next run finds the curve cached and says nothing."""
    said = "specchat: timing v(K) for this model before the first round (once; cached after)"
    args = ["--prompt", "a b a b a b a b", "--raw", "--target", str(tiny_target), "--draft", "ngram", "--auto-k",
            "--n-predict", "8"]
    _turn, err = run_json(capsys, *args)
    assert said in err.splitlines()
    _turn, err = run_json(capsys, *args)
    assert "timing v(K)" not in err
