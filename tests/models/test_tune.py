"""``specchat models tune``: the recommendation on recorded measurements, bad input (one line, exit 2), and real
runs - the tiny model with a lower-bit format asked for, and the bundled model with its Q8_0 re-encoding -
that save their results, warm the calibration cache and show up in ``models list``."""

from __future__ import annotations

import dataclasses

import json
from pathlib import Path

import pytest

from specchat.models.presets import SMOLLM2_Q8_FILE
from specchat.bench.tune import recommend
from specchat.models.tune_results import Mode, TuneResult, VariantResult, load_results, save_result

from .clirun import run_cli


WORKLOAD = {"plain_chat": "plain chat", "copy_heavy": "copy-heavy"}


def _variant(label: str, *, source: bool = False, lossy: bool = False, one_row: bool = False, path: str = "",
             **modes: dict[str, Mode]) -> VariantResult:
    return VariantResult(
        label=label, file=f"{label}.gguf", path=path or f"/m/{label}.gguf", weights=label.split()[0], repack="off",
        source=source, lossy=lossy, one_row=one_row, note="", modes={WORKLOAD[w]: m for w, m in modes.items()},
    )


# the issue's own table, as measured runs (tok/s), with the one-row kernels of this CPU
RECORDED = [
    _variant("Q4_1", source=True, path="/m/q41.gguf",
             plain_chat={"plain": Mode(tok_s=40.0), "auto": Mode(tok_s=39.0)},
             copy_heavy={"plain": Mode(tok_s=40.0), "auto": Mode(tok_s=48.0)}),
    _variant("Q8_0", plain_chat={"plain": Mode(tok_s=35.0), "auto": Mode(tok_s=34.0)},
             copy_heavy={"plain": Mode(tok_s=35.0), "auto": Mode(tok_s=80.0)}),
    _variant("F16", plain_chat={"plain": Mode(tok_s=24.0)}, copy_heavy={"plain": Mode(tok_s=24.0), "auto": Mode(tok_s=60.0)}),
    _variant("Q4_0", lossy=True, plain_chat={"plain": Mode(tok_s=47.0)}, copy_heavy={"auto": Mode(tok_s=90.0)}),
    _variant("Q4_1 one-row", one_row=True, path="/m/q41.gguf",
             plain_chat={"plain": Mode(tok_s=100.0)}, copy_heavy={"plain": Mode(tok_s=98.0)}),
]


def test_recommend_picks_the_fastest_measured_variant_and_mode_per_workload() -> None:
    plain = recommend(RECORDED, "plain chat")
    assert (plain.label, plain.mode, plain.tok_s, plain.measured) == ("Q4_1 one-row", "plain", 100.0, True)
    copy = recommend(RECORDED, "copy-heavy")
    assert (copy.label, copy.mode) == ("Q4_1 one-row", "plain")
    without_one_row = [v for v in RECORDED if not v.one_row]
    copy = recommend(without_one_row, "copy-heavy")
    assert (copy.label, copy.mode, copy.tok_s) == ("Q8_0", "auto", 80.0)  # the lossy Q4_0 (90) is not offered
    assert recommend(without_one_row, "copy-heavy", allow_lossy=True).label == "Q4_0"


def test_recommend_keeps_the_source_file_when_it_is_within_the_margin() -> None:
    vs = [
        _variant("Q4_1", source=True, plain_chat={"plain": Mode(tok_s=40.0)}),
        _variant("Q8_0", plain_chat={"plain": Mode(tok_s=41.0)}),  # +2.5 %: noise on a shared CPU
    ]
    choice = recommend(vs, "plain chat")
    assert choice.label == "Q4_1" and "keep the source file" in choice.why
    vs[1].modes["plain chat"]["plain"].tok_s = 44.0  # +10 %: a real difference
    assert recommend(vs, "plain chat").label == "Q8_0"


def test_recommend_falls_back_to_predictions_and_says_so() -> None:
    vs = [
        _variant("Q4_1", source=True, copy_heavy={"auto": Mode(predicted_tok_s=50.0)}),
        _variant("F16", copy_heavy={"auto": Mode(predicted_tok_s=70.0)}),
    ]
    choice = recommend(vs, "copy-heavy")
    assert (choice.label, choice.measured, choice.why) == ("F16", False, "fastest predicted")
    assert recommend(vs, "plain chat") is None  # nothing measured or predicted for it


def test_results_are_saved_and_read_back(tmp_path: Path) -> None:
    result = TuneResult(source="x.gguf", source_path="/m/x.gguf", threads=1, split_threads_batch=2, drafter="ngram",
                        cpu="cpu", measured_at=1.0, variants=RECORDED,
                        choices=[c for w in ("plain chat", "copy-heavy") if (c := recommend(RECORDED, w))])
    path = save_result(tmp_path, result)
    assert path == tmp_path / "tune" / "x.gguf.json"
    (back,) = load_results(tmp_path)
    assert back == result
    (tmp_path / "tune" / "broken.json").write_text("{")
    assert load_results(tmp_path) == [result]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--runs", "0"], "--runs 0 must be a positive number"),
        (["--reps", "-1"], "--reps -1 must be a positive number"),
        (["--n-predict", "0"], "--n-predict 0 must be a positive number"),
        (["--threads", "0"], "--threads 0 must be at least 1"),
        (["--formats", "Q9_9"], "'Q9_9' is not a weight format llama.cpp can write"),
        (["--flash-attn", "on,fast"], "'fast' is not a flash-attention setting"),
        (["/nonexistent/model.gguf"], "/nonexistent/model.gguf"),
        (["no-such-model"], "unknown model 'no-such-model'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, isolated_config: Path, tmp_path: Path, argv, needle) -> None:
    code, out, err = run_cli(capsys, "models", "tune", "--data-dir", str(tmp_path), "--no-progress", *argv)
    assert code == 2, (out, err)
    assert out == "" and len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err
    assert not (tmp_path / "tune").exists()


def test_a_truncated_model_is_one_line(capsys, isolated_config: Path, tmp_path: Path, tiny_target: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny_target.read_bytes()[:5000])
    code, _out, err = run_cli(capsys, "models", "tune", str(broken), "--data-dir", str(tmp_path), "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "truncated" in err


def test_tune_measures_local_files_even_with_a_llama_server_configured(capsys, isolated_config: Path, tmp_path: Path,
                                                                     tiny_target: Path, monkeypatch) -> None:
    """server_url (here from the environment, an address nothing listens on) is for the app's replies; tune
    times the files on this CPU and never connects to it (it did: a connection error, nothing tuned)."""
    monkeypatch.setenv("SPECCHAT_SERVER_URL", "http://127.0.0.1:9")
    data = tmp_path / "data"
    code, out, err = run_cli(capsys, "models", "tune", str(tiny_target), "--data-dir", str(data), "--formats", "F32",
                             "--threads", "1", "--reps", "1", "--no-runs", "--no-progress")
    assert code == 0, err
    (result,) = load_results(data)
    # flash attention as llama.cpp chooses, then off, and where llama.cpp's extra buffer types are its default
    # also without them (tune measures all of these by default)
    from specchat.engine.model import extra_buffer_types_safe

    repack_off = ["F32 repack-off"] if extra_buffer_types_safe() else []
    assert [v.label for v in result.variants] == ["F32", "F32 fa-off", *repack_off] and result.variants[0].t1_ms
    assert [v.flash_attn for v in result.variants] == ["auto", "off", *["auto"] * len(repack_off)]
    assert all(v.t1_ms for v in result.variants)


def test_tune_the_tiny_model_with_a_lower_bit_format_asked_for(capsys, isolated_config: Path, tmp_path: Path,
                                                              tiny_target: Path) -> None:
    """A real tune, tiny and quick: F32 source and the Q8_0 asked for (fewer bits: flagged as changing the
    output), verify cost timed, plain chat and copy-heavy run with n-gram and auto-K, a recommendation per
    workload, the result saved and the timings in the calibration cache (the app starts warm on both files)."""
    from specchat.engine.calibration_cache import CalibrationCache
    from specchat.engine.model import extra_buffer_types_safe

    data = tmp_path / "data"
    code, out, err = run_cli(capsys, "models", "tune", str(tiny_target), "--data-dir", str(data), "--formats", "Q8_0",
                             "--threads", "1", "--runs", "1", "--n-predict", "6", "--reps", "1", "--no-progress",
                             "--flash-attn", "auto", "--repack", "auto")
    assert code == 0, err
    (result,) = load_results(data)
    labels = [v.label for v in result.variants]
    one_row = [] if extra_buffer_types_safe() else ["Q8_0 one-row"]  # Q8_0 has AMX kernels, F32 none
    assert labels == ["F32", "Q8_0", *one_row] and result.variant("Q8_0").lossy and not result.variant("F32").lossy
    for v in result.variants:
        assert v.t1_ms and set(v.v) == {"1", "4", "8", "16", "32", "64"} and v.reason.startswith(f"{v.weights}: ")
        for workload in ("plain chat", "copy-heavy"):
            assert v.modes[workload]["plain"].tok_s and v.modes[workload]["plain"].predicted_tok_s
            assert ("auto" in v.modes[workload]) != v.one_row  # one-row kernels: baselines only
            assert v.one_row or v.modes[workload]["auto"].tok_s
    assert {c.workload for c in result.choices} == {"plain chat", "copy-heavy"}
    assert all(c.measured for c in result.choices)
    assert "Recommended:" in out and "re-quantised: changes the model's output" in out
    # each format's auto-K run and its plain run measured as one pair, round by round on two copies (as bench)
    assert result.interleave == "rounds" and "interleaved round by round on two copies of the file" in out
    cached = {Path(e.key.path).name for e in CalibrationCache(data / "calibration").entries()}
    assert cached == {tiny_target.name, tiny_target.stem + ".Q8_0.gguf"}

    code, out, err = run_cli(capsys, "models", "list", "--data-dir", str(data))
    assert code == 0, err
    assert "Tuned (specchat models tune)" in out and f"{tiny_target.name} (threads 1, drafter ngram" in out
    assert "Verify cost on this machine" in out and "Q8_0: " in out  # the derived file (the source is not listed)


def test_tune_runs_its_pairs_one_reply_after_the_other_on_request_or_where_a_copy_does_not_fit(
        capsys, isolated_config: Path, tmp_path: Path, tiny_target: Path, monkeypatch) -> None:
    """``--interleave replies``, or too little memory for a second copy (one line on stderr): each format's auto-K run
    follows its plain run on the one copy, and the saved result and the report say so."""
    from specchat.bench import lockstep

    argv = ["models", "tune", str(tiny_target), "--formats", "F32", "--threads", "1", "--runs", "1", "--n-predict", "4",
            "--reps", "1", "--no-progress", "--flash-attn", "auto", "--repack", "auto"]
    code, out, err = run_cli(capsys, *argv, "--data-dir", str(tmp_path / "a"), "--interleave", "replies")
    assert code == 0, err
    (result,) = load_results(tmp_path / "a")
    assert result.interleave == "replies" and "right after its plain run (one reply after the other)" in out
    monkeypatch.setattr(lockstep, "available_bytes", lambda: 1 << 20)  # 1 MiB free
    code, out, err = run_cli(capsys, *argv, "--data-dir", str(tmp_path / "b"))
    assert code == 0, err
    (result,) = load_results(tmp_path / "b")
    assert result.interleave == "replies" and "second copy" in err and "available 0.0 GiB" in err


def test_tune_the_bundled_model_and_its_q8_re_encoding(capsys, isolated_config: Path, tmp_path: Path,
                                                       demo_data_dir: Path) -> None:
    """The bundled Q4_1 and its Q8_0 (already derived by the demo fixture: tune reuses it), timings only: every
    variant's verify cost in words, the one-row AMX variants where this CPU needs them, recommendations from
    the predictions, and the JSON output."""
    from specchat.engine.model import extra_buffer_types_safe

    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / SMOLLM2_Q8_FILE).symlink_to(demo_data_dir / "models" / SMOLLM2_Q8_FILE)
    code, out, err = run_cli(capsys, "models", "tune", "--data-dir", str(data), "--formats", "Q8_0", "--threads", "1",
                             "--reps", "1", "--no-runs", "--no-progress", "--json", "--flash-attn", "auto")
    assert code == 0, err
    report = json.loads(out)
    labels = [v["label"] for v in report["variants"]]
    one_row = [] if extra_buffer_types_safe() else ["Q4_1 one-row", "Q8_0 one-row"]
    # where llama.cpp's extra buffer types are its default (they batch safely), each format also without them
    repack_off = ["Q4_1 repack-off", "Q8_0 repack-off"] if extra_buffer_types_safe() else []
    assert labels == ["Q4_1", "Q8_0", *one_row, *repack_off]
    assert (data / "models" / SMOLLM2_Q8_FILE).is_symlink()  # reused, not derived again
    by = {v["label"]: v for v in report["variants"]}
    assert by["Q8_0"]["reason"].startswith("Q8_0: ") and by["Q4_1"]["reason"].startswith("Q4_1: ")
    assert not by["Q8_0"]["lossy"] and by["Q8_0"]["note"] == "re-encoded: the source's weights"
    for label in one_row:
        assert "one row at a time" in by[label]["reason"] and by[label]["split_gain"] is None
    for label in repack_off:
        v = by[label]
        assert v["repack"] == "off" and not v["source"] and "repack off" in v["note"] and v["t1_ms"] > 0
        assert v["path"] == by[label.removesuffix(" repack-off")]["path"]  # the same file, other kernels
    # no runs: plain decoding is predicted from the one-row times; what the drafter carries is unknown
    (choice,) = report["choices"]
    assert (choice["workload"], choice["mode"], choice["measured"]) == ("plain chat", "plain", False)
    assert any("--no-runs: the drafter's acceptance is unknown" in n for n in report["notes"])
    assert all(v["modes"]["copy-heavy"]["auto"]["predicted_tok_s"] is None for v in report["variants"] if not v["one_row"])
    assert report["split_threads_batch"] in (None, 2) and report["cpu"]


def test_a_flash_attention_off_choice_is_written_as_its_config_line() -> None:
    """The recommendation's config lines select the variant's flash-attention setting when it is not llama.cpp's
    choice (without it, the user would run the file with the setting tune did not recommend)."""
    from specchat.bench.tune import settings_for
    from specchat.models.tune_results import Choice, VariantResult

    v = VariantResult(label="Q8_0 fa-off", file="m.Q8_0.gguf", path="/x/m.Q8_0.gguf", weights="Q8_0", repack="off",
                      source=False, lossy=False, one_row=False, note="", flash_attn="off")
    c = Choice(workload="copy-heavy", label=v.label, mode="auto", tok_s=1.0, x_source=2.0, measured=True, why="")
    assert settings_for(c, v, "ngram", None).endswith('repack = "off", flash_attn = "off"')
    plain = settings_for(c, dataclasses.replace(v, flash_attn="auto"), "ngram", None)
    assert "flash_attn" not in plain


def test_a_flash_attention_copy_keeps_its_variants_warnings() -> None:
    """A fa-off copy of a re-quantised or one-row variant still says so (its note named only the attention)."""
    from specchat.models.formats import Variant

    lossy = Variant("Q4_0 fa-off", Path("m.Q4_0.gguf"), "Q4_0", "off", lossy=True, flash_attn="off").note
    one_row = Variant("Q4_1 one-row fa-off", Path("m.gguf"), "Q4_1", "on", one_row=True, flash_attn="off").note
    assert "changes the model's output" in lossy and "near-ties" in lossy
    assert "one-row AMX kernels" in one_row and "near-ties" in one_row


def test_repack_off_copies_of_the_batched_variants_and_their_config_line(tmp_path: Path, monkeypatch) -> None:
    """``--repack auto,off`` adds, for each variant loaded at llama.cpp's default kernels, a copy without its
    extra buffer types (the same file); where those crash in batches (one-row AMX CPUs) every variant is already
    loaded without them and no copy is made. A recommended copy's config line says ``repack = "off"``."""
    import specchat.engine.model as model_mod
    from specchat.bench.tune import settings_for
    from specchat.models.tune_results import Choice
    from specchat.models.bundled import bundled_model_path
    from specchat.models.formats import parse_repack, variants_for

    src = bundled_model_path()
    monkeypatch.setattr(model_mod, "extra_buffer_types_safe", lambda: True)
    vs = variants_for(src, [], tmp_path, repack=parse_repack("auto,off"), flash_attn=["auto", "off"])
    assert [(v.label, v.repack, v.flash_attn, v.source) for v in vs] == [
        ("Q4_1", "auto", "auto", True), ("Q4_1 fa-off", "auto", "off", False), ("Q4_1 repack-off", "off", "auto", False),
    ]
    assert vs[2].path == src and "repack off" in vs[2].note
    assert [v.label for v in variants_for(src, [], tmp_path)] == ["Q4_1"]  # only asked for: the default is one setting
    monkeypatch.setattr(model_mod, "extra_buffer_types_safe", lambda: False)
    assert [v.label for v in variants_for(src, [], tmp_path, repack=["auto", "off"])] == ["Q4_1"]
    v = VariantResult(label="Q4_1 repack-off", file=src.name, path=str(src), weights="Q4_1", repack="off", source=False,
                      lossy=False, one_row=False, note="")
    c = Choice(workload="plain chat", label=v.label, mode="plain", tok_s=1.0, x_source=1.05, measured=True, why="")
    assert settings_for(c, v, "ngram", None) == 'target = "bundled", draft = "none", repack = "off"'


@pytest.mark.parametrize("text", ["", "on", "auto,fast"])
def test_a_bad_repack_list_is_one_line(capsys, isolated_config: Path, tmp_path: Path, text: str) -> None:
    code, out, err = run_cli(capsys, "models", "tune", "--data-dir", str(tmp_path), "--repack", text, "--no-progress")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--repack" in err


def _repack_result(cpu: str, threads: int, path: str, auto_tok_s: float, off_tok_s: float, *,
                   measured_at: float = 1.0, flash_attn: str = "auto") -> TuneResult:
    def variant(label: str, repack: str, tok_s: float) -> VariantResult:
        return VariantResult(label=label, file=Path(path).name, path=path, weights="Q4_1", repack=repack,
                             source=repack == "auto", lossy=False, one_row=False, note="", flash_attn=flash_attn,
                             modes={"plain chat": {"plain": Mode(tok_s=tok_s), "auto": Mode(tok_s=tok_s * 0.99)}})

    return TuneResult(source=Path(path).name, source_path=path, threads=threads, split_threads_batch=None,
                      drafter="ngram", cpu=cpu, measured_at=measured_at,
                      variants=[variant("Q4_1", "auto", auto_tok_s), variant("Q4_1 repack-off", "off", off_tok_s)])


def test_repack_measure_follows_the_newest_tune_of_the_file_on_this_cpu_and_threads(tmp_path: Path) -> None:
    """The AMD EPYC Zen 5 here, ``models tune --threads 1``: the bundled Q4_1 at 108.0 tok/s with llama.cpp's
    repacked layouts and 119.2 without. Only a result of the same file, CPU, threads and flash-attention setting
    counts, the newest first, and "off" must win by more than the tie margin."""
    from specchat.models.tune_results import RepackMeasure, repack_measure

    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    here = dict(cpu="EPYC", threads=1, flash_attn="auto", speculates=True)

    def measured_repack(results, path, **kw):
        m = repack_measure(results, path, **kw)
        return m.setting if m is not None else None

    m = repack_measure([_repack_result("EPYC", 1, str(f), 108.0, 119.2)], f, **here)
    assert m == RepackMeasure("off", "auto", 108.0 * 0.99, 119.2 * 0.99)  # the session's mode: auto-K
    assert m.words() == "repack off: models tune, plain chat with auto-K, 107 tok/s on, 118 off"
    plain = repack_measure([_repack_result("EPYC", 1, str(f), 108.0, 119.2)], f, **{**here, "speculates": False})
    assert plain.words() == "repack off: models tune, plain chat, 108 tok/s on, 119 off"
    assert measured_repack([_repack_result("EPYC", 1, str(f), 108.0, 119.2)], f, **here) == "off"
    assert measured_repack([_repack_result("EPYC", 1, str(f), 108.0, 110.0)], f, **here) == "auto"  # within 3 %
    assert measured_repack([_repack_result("Xeon", 1, str(f), 108.0, 119.2)], f, **here) is None
    assert measured_repack([_repack_result("EPYC", 2, str(f), 108.0, 119.2)], f, **here) is None
    assert measured_repack([_repack_result("EPYC", 1, str(tmp_path / "other.gguf"), 108.0, 119.2)], f, **here) is None
    assert measured_repack([_repack_result("EPYC", 1, str(f), 108.0, 119.2, flash_attn="off")], f, **here) is None
    newest_first = [_repack_result("EPYC", 1, str(f), 120.0, 110.0, measured_at=2.0),
                    _repack_result("EPYC", 1, str(f), 108.0, 119.2, measured_at=1.0)]
    assert measured_repack(newest_first, f, **here) == "auto"
    for r in newest_first:  # saved and read back, newest first
        save_result(tmp_path, dataclasses.replace(r, source=f"{r.measured_at}.gguf"))
    assert measured_repack(load_results(tmp_path), f, **here) == "auto"


def test_the_loader_follows_a_saved_tune_that_measured_the_file_faster_without_repack(isolated_config: Path,
                                                                                      tmp_path: Path) -> None:
    """The real bundled model loaded with ``repack = "auto"``: where llama.cpp's extra buffer types are its default,
    a saved tune of this file on this CPU at these threads that measured it faster without them loads it without
    them; with no result, or with ``repack = "on"``, llama.cpp's default stays."""
    from specchat.config import load_settings
    from specchat.engine.calibration_cache import cpu_identity
    from specchat.engine.model import extra_buffer_types_safe
    from specchat.loading import load_engine
    from specchat.models.bundled import bundled_model_path

    if not extra_buffer_types_safe():
        pytest.skip("a one-row AMX CPU: repack auto is decided by its kernels (test_kernels), not by a tune")
    data = tmp_path / "data"
    settings = load_settings(None, {"data_dir": str(data), "threads": 1, "draft": "ngram"})

    def loaded_repack(s) -> tuple[bool, str]:
        session = load_engine(s)
        try:
            return session.decoder.target.repack, session.info().kernels
        finally:
            session.close()

    assert loaded_repack(settings) == (True, "")  # nothing measured: llama.cpp's default, nothing to say
    save_result(data, _repack_result(cpu_identity(), 1, str(bundled_model_path()), 108.0, 119.2))
    assert loaded_repack(settings) == (False, "repack off: models tune, plain chat with auto-K, 107 tok/s on, 118 off")
    assert loaded_repack(settings.model_copy(update={"repack": "on"})) == (True, "")  # set, not measured
    save_result(data, _repack_result(cpu_identity(), 1, str(bundled_model_path()), 119.2, 108.0, measured_at=2.0))
    assert loaded_repack(settings) == (True, "repack on: models tune, plain chat with auto-K, 118 tok/s on, 107 off")
