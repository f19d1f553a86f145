"""``specchat models list``: bundled, derived, configured and preset models; compatible pairs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specchat.models.bundled import BUNDLED_FILE
from specchat.models.presets import SMOLLM2_F16_FILE, SMOLLM2_Q8_FILE, SMOLLM2_SKIP_FILE

from .clirun import run_cli


def _copy_demo(demo_data_dir: Path, tmp_path: Path) -> Path:
    """A private data dir holding the demo files as symlinks (tests may add files next to them)."""
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    for p in (demo_data_dir / "models").glob("*.gguf"):
        (models / p.name).symlink_to(p)
    return tmp_path / "data"


def test_list_shows_bundled_derived_presets_and_pairs(capsys, isolated_config: Path, demo_data_dir: Path) -> None:
    code, out, err = run_cli(capsys, "models", "list", "--data-dir", str(demo_data_dir))
    assert code == 0, err
    table = out.split("Configured:")[0]
    rows = {line.split()[0]: line for line in table.splitlines() if line.startswith("  ") and line.strip()}
    assert "bundled" in rows[BUNDLED_FILE] and "Q4_1" in rows[BUNDLED_FILE] and "49152" in rows[BUNDLED_FILE]
    assert "derived" in rows[SMOLLM2_F16_FILE] and " F16 " in rows[SMOLLM2_F16_FILE]
    skip = rows[SMOLLM2_SKIP_FILE].split()
    assert skip[1] == "derived" and "12" in skip and "llama" in skip  # 12 of 30 blocks
    assert "smollm2-f16-q41      local  ready" in out
    assert "smollm2-layerskip    local  ready" in out
    assert "smollm2-q8-ngram     local  ready" in out
    assert "draft  ngram (n-gram lookup over the conversation: no file)" in out
    assert "qwen2.5-1.5b         hub    not downloaded: run specchat models pull qwen2.5-1.5b" in out
    assert f"  {SMOLLM2_F16_FILE} <- {BUNDLED_FILE}" in out
    assert f"  {BUNDLED_FILE} <- {SMOLLM2_SKIP_FILE}" in out
    assert "Configured: target = 'bundled', draft = 'ngram': target with the n-gram drafter" in out


def test_list_json_and_configured_pair(capsys, isolated_config: Path, demo_data_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECCHAT_TARGET", "preset:smollm2-f16-q41")
    code, out, err = run_cli(capsys, "models", "list", "--json", "--data-dir", str(demo_data_dir))
    assert code == 0, err
    data = json.loads(out)
    assert data["configured"] == {"target": "preset:smollm2-f16-q41", "draft": "ngram", "state": "compatible"}
    by_file = {m["file"]: m for m in data["models"]}
    assert by_file[SMOLLM2_F16_FILE]["roles"] == ["derived", "configured target"]
    assert "configured draft" in by_file[BUNDLED_FILE]["roles"]
    assert by_file[SMOLLM2_SKIP_FILE]["block_count"] == 12
    assert by_file[SMOLLM2_F16_FILE]["quantization"] == "F16"
    presets = {p["name"]: p for p in data["presets"]}
    assert presets["smollm2-f16-q41"]["ready"] and presets["smollm2-f16-q41"]["compat"] == {"ok": True, "rule": None}
    assert not presets["llama3.1-8b"]["ready"]


def test_list_reports_unusable_files_and_incompatible_drafts(
    capsys, isolated_config: Path, demo_data_dir: Path, tmp_path: Path, make_tiny_gguf, monkeypatch
) -> None:
    data_dir = _copy_demo(demo_data_dir, tmp_path)
    models = data_dir / "models"
    f16 = (demo_data_dir / "models" / SMOLLM2_F16_FILE).read_bytes()
    (models / "broken.gguf").write_bytes(f16[: len(f16) // 3])
    (models / "qwen2.5-0.5b-instruct-q4_k_m.gguf.part").write_bytes(b"GGUF" + b"\0" * 100)
    other_vocab = make_tiny_gguf(seed=3, n_vocab_pad=200, name="tiny-other-vocab")
    shutil.copy(other_vocab, models / "other-vocab.gguf")
    monkeypatch.setenv("SPECCHAT_DRAFT", "other-vocab")
    code, out, err = run_cli(capsys, "models", "list", "--data-dir", str(data_dir))
    assert code == 0, err
    broken = next(line for line in out.splitlines() if line.strip().startswith("broken.gguf"))
    assert "unusable:" in broken and "is truncated" in broken
    assert "rule 'vocab size'" in out and "target has 49152 tokens, draft 49352" in out
    assert "other-vocab.gguf" not in "".join(line for line in out.splitlines() if " <- " in line)
    assert "Interrupted downloads" in out and "qwen2.5-0.5b-instruct-q4_k_m.gguf.part" in out


def test_list_in_an_empty_data_dir(capsys, isolated_config: Path, tmp_path: Path) -> None:
    code, out, err = run_cli(capsys, "models", "list", "--data-dir", str(tmp_path / "fresh"))
    assert code == 0, err
    assert BUNDLED_FILE in out
    assert "smollm2-f16-q41      local  not derived: run specchat models derive --demo" in out
    assert "none yet: run 'specchat models derive --demo'" in out
    assert not (tmp_path / "fresh").exists()  # listing never creates the data dir
    # each missing derived file says how to derive it, not that it was not downloaded
    f16 = next(line for line in out.splitlines() if line.strip().startswith(f"target {SMOLLM2_F16_FILE}"))
    assert f16.endswith("  [not derived yet: run specchat models derive --demo (every demo file) "
                        "or specchat models derive --quant F16 (this one)]"), f16
    skip = next(line for line in out.splitlines() if line.strip().startswith(f"draft  {SMOLLM2_SKIP_FILE}"))
    assert skip.endswith("or specchat models derive --keep-layers 0-5,24-29 (this one)]"), skip
    assert "not downloaded" not in out.split("smollm2-f16-q41")[1]  # the local presets' lines


def test_list_names_the_pull_command_for_a_missing_hub_file(capsys, isolated_config: Path, tmp_path: Path,
                                                            tiny_target: Path) -> None:
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    (models / "Qwen2.5-7B-Instruct-Q4_K_M.gguf").symlink_to(tiny_target)  # a GGUF where the 7B target goes
    code, out, err = run_cli(capsys, "models", "list", "--data-dir", str(tmp_path / "data"))
    assert code == 0, err
    section = out.split("  qwen2.5-7b ")[1].split("  llama3.1-8b ")[0]
    assert section.lstrip().startswith("hub    not downloaded: run specchat models pull qwen2.5-7b")
    draft = next(line for line in section.splitlines() if line.strip().startswith("draft "))
    assert draft.endswith("  [not downloaded: run specchat models pull qwen2.5-7b]"), draft


def test_the_printed_derive_command_writes_exactly_the_preset_file(bundled_model: Path) -> None:
    """``specchat models derive ARGS`` names its output with default_name: it must be the preset's file name."""
    from specchat.engine.gguf import read_gguf_info
    from specchat.models.derive import default_name, parse_layers
    from specchat.models.presets import PRESETS, DerivedFile

    blocks = read_gguf_info(bundled_model).block_count
    derived = {f for p in PRESETS.values() for _, f in p.files() if isinstance(f, DerivedFile)}
    assert {f.filename for f in derived} == {SMOLLM2_F16_FILE, SMOLLM2_Q8_FILE, SMOLLM2_SKIP_FILE}
    for f in derived:
        assert f.source == "bundled" and "--from" not in f.derive_command  # derive's default source
        keep = parse_layers(f.keep_layers, blocks) if f.keep_layers else None
        assert default_name(bundled_model, f.quant, keep) == f.filename


def test_list_does_not_load_llama_cpp(isolated_config: Path, demo_data_dir: Path) -> None:
    """Headers only: listing (even the bundled model, whose package imports llama_cpp) never loads llama.cpp."""
    import subprocess
    import sys

    from .clirun import REPO

    script = (
        "import sys\n"
        "from specchat.cli import main\n"
        f"code = main(['models', 'list', '--data-dir', {str(demo_data_dir)!r}])\n"
        "assert code == 0\n"
        "print('llama_cpp loaded' if 'llama_cpp' in sys.modules else 'llama_cpp not loaded')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(REPO), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("llama_cpp not loaded")
    assert SMOLLM2_F16_FILE in proc.stdout
