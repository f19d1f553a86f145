"""Every way a llama-server URL can fail gives one line (what, where, what to do), exit code 2 from the
CLI, no traceback, and nothing already saved is lost."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specchat.cli import main
from specchat.engine.controls import SamplingParams
from specchat.engine.events import EngineError, Piece, Turn
from specchat.engine.llama_server import LlamaServer, ServerError
from specchat.engine.remote import connect
from specchat.history import HistoryStore

from .conftest import free_port

pytestmark = pytest.mark.usefixtures("isolated_config")


def one_line_error(capsys, *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: "), err
    assert "Traceback" not in err
    return lines[0]


class HtmlPage(BaseHTTPRequestHandler):
    """Some other web application: every path is the same HTML page."""

    def do_GET(self) -> None:  # noqa: N802
        body = b"<html><body>router admin</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def html_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), HtmlPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_refused_connection(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    line = one_line_error(capsys, "generate", "--server", url, "--prompt", "hi")
    assert "connection refused" in line and url in line and "start llama-server" in line


def test_wrong_url_path_on_a_real_llama_server(capsys, self_draft_server):
    url = self_draft_server.url + "/v1"
    line = one_line_error(capsys, "generate", "--server", url, "--prompt", "hi")
    assert f"{url} is not a llama-server URL" in line and "404" in line and "base URL" in line


def test_a_server_that_is_not_llama_server(capsys, html_server):
    line = one_line_error(capsys, "generate", "--server", html_server, "--prompt", "hi")
    assert "does not look like llama-server" in line and "text/html" in line and html_server in line


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:8080", "127.0.0.1:8080", "http://", "http://host:70000"])
def test_a_malformed_url_is_a_config_error(capsys, url):
    line = one_line_error(capsys, "generate", "--server", url, "--prompt", "hi")
    assert "server_url" in line and "http://127.0.0.1:8080" in line


def test_environment_variable_names_the_source(capsys, monkeypatch):
    monkeypatch.setenv("SPECCHAT_SERVER_URL", "gopher://x")
    line = one_line_error(capsys, "generate", "--prompt", "hi")
    assert "SPECCHAT_SERVER_URL" in line


def test_a_hung_server_times_out_with_one_line():
    # accepts connections (the kernel's backlog) but never answers
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        with pytest.raises(ServerError) as exc:
            connect(url, server=LlamaServer(url, read_timeout=0.5, retries=0))
    message = str(exc.value)
    assert "\n" not in message and "sent nothing for 0.5 s" in message and url in message


def test_connecting_while_the_server_starts_waits_for_it(llama_server):
    server = llama_server(wait=False)  # not listening yet, then answering 503 "Loading model"
    seen: list[str] = []
    session = connect(server.url, server=LlamaServer(server.url, retries=30), progress=lambda f, what: seen.append(what))
    try:
        assert seen[0].startswith("connecting to llama-server") and seen[-1] == "connected"
        turn = [e for e in session.send("Hi") if isinstance(e, Turn)][0]
        assert turn.tokens
    finally:
        session.close()


def test_a_server_that_dies_mid_reply_keeps_the_partial_reply_and_the_history(llama_server, tmp_path):
    server = llama_server()
    session = connect(server.url, n_predict=400, sampling=SamplingParams(temperature=0.0))
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        conv = store.create_conversation(target=session.info().target_name)
        session.n_predict = 8
        first = [e for e in session.send("Say hello.") if isinstance(e, Turn)][0]
        store.sync(conv, session.messages)
        session.n_predict = 400
        events, pieces = [], 0
        for ev in session.send("Write a very long story about a lighthouse keeper."):
            events.append(ev)
            if isinstance(ev, Piece):
                pieces += 1
                if pieces == 5:
                    server.kill()  # the server dies mid-reply
        store.sync(conv, session.messages)
        turn = [e for e in events if isinstance(e, Turn)][-1]
        errors = [e.message for e in events if isinstance(e, EngineError)]
        assert events[-1] == EngineError(errors[0]) and len(errors) == 1 and "\n" not in errors[0]
        assert "closed the connection" in errors[0] and server.url in errors[0] and "partial reply" in errors[0]
        assert turn.stop_reason == "error" and len(turn.tokens) >= 5 and turn.text
        # the partial reply is saved, marked; the turn before it is intact
        store.close()
        store = HistoryStore(tmp_path / "history.sqlite3")
        _conv, saved = store.load(conv)
        assert [m.role for m in saved] == ["user", "assistant", "user", "assistant"]
        assert saved[1].content == first.text and not saved[1].stopped
        assert saved[3].content == turn.text and saved[3].stopped and saved[3].stats.stop_reason == "error"
        # the next message gets a one-line error too (raised when the turn starts, like a prompt too long
        # for the context on the local engine), and loses nothing
        with pytest.raises(ServerError, match="connection refused") as exc:
            list(session.send("Are you there?"))
        assert "\n" not in str(exc.value)
        store.sync(conv, session.messages)
        _conv, saved_again = store.load(conv)
        assert [m.content for m in saved_again[:4]] == [m.content for m in saved]
    finally:
        session.close()
        store.close()


def test_generate_prints_the_partial_reply_and_one_line_when_the_server_dies(llama_server, isolated_config):
    server = llama_server()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specchat.cli", "generate", "--server", server.url, "--n-predict", "400",
         "--temperature", "0", "--prompt", "Write a very long story about a lighthouse keeper."],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = proc.stdout.read(20)  # some of the reply has streamed
    server.kill()
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    lines = [line for line in err.decode().splitlines() if not line.startswith("specchat: Remote llama-server")]
    assert len(lines) == 1 and "closed the connection" in lines[0] and "Traceback" not in err.decode()
    assert (first + rest).decode().startswith(first.decode()) and first.strip()  # the partial reply stays printed
