"""Pull verification on local files, resume and re-download against a fake hub on 127.0.0.1, and the
unreachable-hub path for real (a closed port on 127.0.0.1, and HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specchat.models.hub import PART_SUFFIX, HubError, check_file, pull_file
from specchat.models.presets import PRESETS, HubFile

from .clirun import run_cli_subprocess


# ------------------------------------------------------------------------------------ check_file (local)


def test_check_file_accepts_a_complete_gguf(small_gguf) -> None:
    path = small_gguf()
    size = path.stat().st_size
    assert check_file(path, size).ok
    assert check_file(path, None).ok  # unpinned size: the GGUF table check alone


def test_check_file_missing(tmp_path: Path) -> None:
    chk = check_file(tmp_path / "nope.gguf", 123)
    assert chk.status == "missing" and not chk.ok


def test_check_file_size_mismatch(small_gguf) -> None:
    path = small_gguf()
    size = path.stat().st_size
    shorter = check_file(path, size + 1000)  # local copy shorter than the hub's: resumable
    assert shorter.status == "partial" and f"{size} of {size + 1000}" in shorter.detail
    longer = check_file(path, size - 1)  # longer than expected: cannot be a prefix, re-download
    assert longer.status == "bad" and "more than the expected" in longer.detail


def test_check_file_bad_magic(tmp_path: Path) -> None:
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"<html>rate limited</html>" + b"\0" * 1000)
    for expected in (path.stat().st_size, None, path.stat().st_size + 10):
        chk = check_file(path, expected)
        assert chk.status == "bad" and "GGUF magic" in chk.detail


def test_check_file_truncated_gguf(small_gguf, tmp_path: Path) -> None:
    full = small_gguf()
    data = full.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    # size unknown: the tensor table says the data runs past the end -> partial, with the byte counts
    chk = check_file(cut, None)
    assert chk.status == "partial" and "truncated" in chk.detail
    # a file of the pinned size whose own tensor table does not fit: not the expected file
    assert check_file(cut, len(data) // 2).status == "bad"
    assert check_file(cut, len(data)).status == "partial"


def test_check_file_fake_size_sparse_file(tmp_path: Path, small_gguf) -> None:
    """A file of exactly the pinned size (sparse) whose GGUF header is valid counts as complete."""
    pinned = PRESETS["qwen2.5-1.5b"].target.size
    path = tmp_path / "qwen.gguf"
    path.write_bytes(small_gguf().read_bytes())
    os.truncate(path, pinned)
    assert check_file(path, pinned).ok
    os.truncate(path, pinned - 1)
    assert check_file(path, pinned).status == "partial"


# ------------------------------------------------------------------------------- pull against a fake hub


@pytest.fixture
def hub_file(fake_hub, small_gguf) -> tuple[HubFile, bytes]:
    data = small_gguf(n_floats=200_000).read_bytes()
    fake_hub.add("test/repo", "model.gguf", data)
    return HubFile("test/repo", "model.gguf", len(data)), data


def test_pull_downloads_and_verifies(fake_hub, hub_file, tmp_path: Path) -> None:
    file, data = hub_file
    path = pull_file(file, tmp_path, endpoint=fake_hub.endpoint)
    assert path == tmp_path / "model.gguf"
    assert path.read_bytes() == data
    assert not (tmp_path / ("model.gguf" + PART_SUFFIX)).exists()
    n_requests = len(fake_hub.requests)
    # pinned size + valid GGUF: the second pull does not contact the hub at all
    messages: list[str] = []
    assert pull_file(file, tmp_path, endpoint=fake_hub.endpoint, say=messages.append) == path
    assert len(fake_hub.requests) == n_requests
    assert "already here" in messages[0]


def test_pull_resumes_an_interrupted_download(fake_hub, hub_file, tmp_path: Path) -> None:
    file, data = hub_file
    have = 300_001
    (tmp_path / ("model.gguf" + PART_SUFFIX)).write_bytes(data[:have])
    path = pull_file(file, tmp_path, endpoint=fake_hub.endpoint)
    assert path.read_bytes() == data
    gets = [r for r in fake_hub.requests if r[0] == "GET"]
    assert gets[-1][2] == f"bytes={have}-"
    assert fake_hub.served == len(data) - have  # only the missing tail went over the wire


def test_pull_resumes_a_truncated_local_file(fake_hub, hub_file, tmp_path: Path) -> None:
    file, data = hub_file
    (tmp_path / "model.gguf").write_bytes(data[:1000])
    path = pull_file(file, tmp_path, endpoint=fake_hub.endpoint)
    assert path.read_bytes() == data
    assert fake_hub.served == len(data) - 1000


def test_pull_redownloads_a_wrong_file(fake_hub, hub_file, tmp_path: Path) -> None:
    file, data = hub_file
    (tmp_path / "model.gguf").write_bytes(b"X" * len(data))  # right size, not GGUF
    (tmp_path / ("model.gguf" + PART_SUFFIX)).write_bytes(b"Y" * 10)  # a stale partial that is not GGUF either
    path = pull_file(file, tmp_path, endpoint=fake_hub.endpoint)
    assert path.read_bytes() == data
    assert fake_hub.served == len(data)
    assert all(r[2] is None for r in fake_hub.requests if r[0] == "GET")


def test_pull_force_downloads_again(fake_hub, hub_file, tmp_path: Path) -> None:
    file, data = hub_file
    pull_file(file, tmp_path, endpoint=fake_hub.endpoint)
    pull_file(file, tmp_path, endpoint=fake_hub.endpoint, force=True)
    assert fake_hub.served == 2 * len(data)


def test_pull_refuses_a_hub_file_of_another_size(fake_hub, hub_file, tmp_path: Path) -> None:
    file, data = hub_file
    pinned = HubFile(file.repo, file.filename, len(data) + 4096)
    with pytest.raises(HubError, match="changed upstream"):
        pull_file(pinned, tmp_path / "models", endpoint=fake_hub.endpoint)
    assert fake_hub.served == 0
    assert not any((tmp_path / "models").iterdir())


def test_pull_deletes_a_download_that_is_not_gguf(fake_hub, tmp_path: Path) -> None:
    fake_hub.add("test/repo", "page.gguf", b"<!doctype html>" + b" " * 5000)
    with pytest.raises(HubError, match="failed verification.*GGUF magic"):
        pull_file(HubFile("test/repo", "page.gguf", None), tmp_path, endpoint=fake_hub.endpoint)
    assert not (tmp_path / "page.gguf").exists()
    assert not (tmp_path / ("page.gguf" + PART_SUFFIX)).exists()


def test_pull_unknown_file_is_one_line(fake_hub, tmp_path: Path) -> None:
    with pytest.raises(HubError) as info:
        pull_file(HubFile("test/repo", "absent.gguf", 10), tmp_path, endpoint=fake_hub.endpoint)
    assert "HTTP 404" in str(info.value) and "\n" not in str(info.value)


def test_pull_unreachable_hub_in_process(closed_port: int, tmp_path: Path) -> None:
    file = HubFile("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf", 491_400_032)
    with pytest.raises(HubError) as info:
        pull_file(file, tmp_path / "models", endpoint=f"http://127.0.0.1:{closed_port}")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"cannot reach 127.0.0.1:{closed_port} (Connection refused)")
    assert f"/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_k_m.gguf by hand into {tmp_path / 'models'}" in msg


def test_pull_unpinned_complete_file_survives_an_unreachable_hub(closed_port: int, tmp_path: Path, small_gguf) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "big.gguf").write_bytes(small_gguf().read_bytes())
    messages: list[str] = []
    path = pull_file(HubFile("org/repo", "big.gguf", None), models, endpoint=f"http://127.0.0.1:{closed_port}",
                     say=messages.append)
    assert path == models / "big.gguf"
    assert "passes the GGUF checks" in messages[0]
    # ...but a truncated unpinned copy still needs the hub
    data = (models / "big.gguf").read_bytes()
    (models / "big.gguf").write_bytes(data[: len(data) // 2])
    with pytest.raises(HubError, match="cannot reach"):
        pull_file(HubFile("org/repo", "big.gguf", None), models, endpoint=f"http://127.0.0.1:{closed_port}")


# ------------------------------------------------------------------------------ the CLI, for real


def test_cli_pull_unreachable_hub_is_one_line_exit_2(closed_port: int, isolated_config: Path, tmp_path: Path) -> None:
    proc = run_cli_subprocess(
        "models", "pull", "qwen2.5-1.5b", "--data-dir", str(tmp_path),
        env={"HF_ENDPOINT": f"http://127.0.0.1:{closed_port}", "SPECCHAT_CONFIG": str(isolated_config)},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"specchat: error: cannot reach 127.0.0.1:{closed_port}")
    assert f"by hand into {tmp_path / 'models'}" in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_cli_pull_offline_is_one_line_exit_2(isolated_config: Path, tmp_path: Path) -> None:
    proc = run_cli_subprocess(
        "models", "pull", "llama3.1-8b", "--data-dir", str(tmp_path),
        env={"HF_HUB_OFFLINE": "1", "SPECCHAT_CONFIG": str(isolated_config)},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "HF_HUB_OFFLINE is set" in lines[0]
    assert "https://huggingface.co/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/resolve/main/" in lines[0]


def test_cli_pull_complete_files_need_no_hub(isolated_config: Path, tmp_path: Path, small_gguf) -> None:
    """Files of the pinned size with a valid GGUF header are verified locally: offline pull succeeds."""
    preset = PRESETS["qwen2.5-1.5b"]
    models = tmp_path / "models"
    models.mkdir()
    header = small_gguf().read_bytes()
    for file in (preset.target, preset.draft):
        path = models / file.filename
        path.write_bytes(header)
        os.truncate(path, file.size)  # sparse: no disk used
    proc = run_cli_subprocess(
        "models", "pull", "qwen2.5-1.5b", "--data-dir", str(tmp_path),
        env={"HF_HUB_OFFLINE": "1", "SPECCHAT_CONFIG": str(isolated_config)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("already here") == 2
    assert 'target = "preset:qwen2.5-1.5b"' in proc.stdout


def test_cli_pull_unknown_preset(isolated_config: Path, tmp_path: Path) -> None:
    proc = run_cli_subprocess("models", "pull", "gpt-5", "--data-dir", str(tmp_path),
                              env={"SPECCHAT_CONFIG": str(isolated_config), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"specchat: error: unknown preset 'gpt-5'; choose one of: {', '.join(PRESETS)}"
    ]
