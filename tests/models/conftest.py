"""Fixtures for the models tests: the derived demo files (written once per session), an isolated config,
a tiny GGUF writer, and a fake Hugging Face hub on 127.0.0.1 (no other address is ever contacted)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gguf
import numpy as np
import pytest


@pytest.fixture(scope="session")
def demo_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir whose models/ holds both demo presets' files (``derive_demo``: F16 target, layer-skip draft).

    Quantising the bundled 98 MB model takes a few seconds on 2 cores, so this runs once per session.
    Tests must not modify this directory.
    """
    from specchat.models.derive import derive_demo

    data_dir = tmp_path_factory.mktemp("demo_data")
    results = derive_demo(data_dir / "models", threads=2)
    assert all(derived is not None for _path, derived in results), "fresh dir: everything must be written"
    return data_dir


@pytest.fixture
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty config file, no SPECCHAT_* settings from the environment, and no hub token or endpoint."""
    import os

    for name in list(os.environ):
        if name.startswith("SPECCHAT_") or name in ("HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_TOKEN"):
            monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config.toml"
    config.write_text("")
    monkeypatch.setenv("SPECCHAT_CONFIG", str(config))
    return config


def write_small_gguf(path: Path, n_floats: int = 65536, seed: int = 0) -> Path:
    """A valid little GGUF (one F32 tensor of ``n_floats``), enough for GGUF magic/size/table checks."""
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_string("general.name", f"small test file {seed}")
    writer.add_tensor("token_embd.weight", np.random.default_rng(seed).standard_normal(n_floats).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def small_gguf(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "small.gguf", n_floats: int = 65536, seed: int = 0) -> Path:
        src = tmp_path / "src"
        src.mkdir(exist_ok=True)
        return write_small_gguf(src / name, n_floats, seed)

    return make


@dataclass
class FakeHub:
    """A minimal hub: HEAD/GET ``/{repo}/resolve/{revision}/{filename}`` with HTTP Range support."""

    endpoint: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    head_size: dict[str, int] = field(default_factory=dict)  # override the size HEAD reports
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range header)
    served: int = 0  # body bytes sent by GET

    def add(self, repo: str, filename: str, data: bytes, revision: str = "main") -> None:
        self.files[f"/{repo}/resolve/{revision}/{filename}"] = data


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        def _lookup(self) -> bytes | None:
            path = self.path.split("?", 1)[0]
            hub.requests.append((self.command, path, self.headers.get("Range")))
            data = hub.files.get(path)
            if data is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.send_header("X-Error-Code", "EntryNotFound")
                self.end_headers()
            return data

        def do_HEAD(self) -> None:
            data = self._lookup()
            if data is None:
                return
            path = self.path.split("?", 1)[0]
            self.send_response(200)
            self.send_header("Content-Length", str(hub.head_size.get(path, len(data))))
            self.send_header("ETag", '"fake-etag"')
            self.send_header("X-Repo-Commit", "0" * 40)
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

        def do_GET(self) -> None:
            data = self._lookup()
            if data is None:
                return
            start = 0
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                start = int(rng.removeprefix("bytes=").split("-", 1)[0])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", '"fake-etag"')
            self.end_headers()
            hub.served += len(body)  # counted before sending: the client may finish before this thread resumes
            self.wfile.write(body)

    return Handler


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
