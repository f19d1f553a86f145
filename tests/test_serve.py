"""``specchat serve`` (issue 24): the app in a real headless browser (Debian's Chromium through its chromedriver),
served by textual-serve from a real ``specchat serve`` process: the page loads the app, a message typed in the
page gets a coloured reply (saved in the real SQLite history with its piece kinds), and a screenshot of the page
shows the sidebar's figures (read back with tesseract, Debian's OCR). Skipped, with the reason, where the browser,
its driver or the OCR is not installed (``.ci/run`` installs them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specchat.cli import main
from specchat.commands.serve import app_command

CHROMIUM, CHROMEDRIVER, TESSERACT = shutil.which("chromium"), shutil.which("chromedriver"), shutil.which("tesseract")
MESSAGE = "Repeat exactly, twice: one two three four five six seven eight nine ten."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ocr(png: Path) -> str:
    return subprocess.run([TESSERACT, str(png), "-"], capture_output=True, text=True, timeout=60).stdout


def _replies(db: Path) -> list[list[str]]:
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [json.loads(k) for (k,) in conn.execute("SELECT kinds FROM messages WHERE role = 'assistant'")]


@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER and TESSERACT),
                    reason="needs Debian's chromium, chromium-driver and tesseract-ocr (.ci/run installs them)")
def test_the_app_in_a_browser_answers_a_message_in_colour(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    port = _free_port()
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_DATA_HOME=str(tmp_path / "xdg"), SPECCHAT_THREADS="1")
    server = subprocess.Popen(
        [sys.executable, "-m", "specchat.cli", "--data-dir", str(data), "serve", "--port", str(port), "--draft", "ngram",
         "--n-predict", "48", "--no-auto-k", "--k", "8"],  # a fixed K: auto-K's priced n-gram drafts only where a
        # batch pays, and on an AMD EPYC Zen 5 the bundled Q4_1's 2-4 rows cost their rows one by one (all plain)
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(arg)
    driver = None
    try:
        first = server.stdout.readline()  # type: ignore[union-attr]
        assert f"open http://127.0.0.1:{port} in a browser" in first
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        deadline = time.monotonic() + 120
        while True:  # the server answers once it listens; the app then loads the bundled model
            try:
                driver.get(f"http://127.0.0.1:{port}/")
                break
            except Exception:
                assert time.monotonic() < deadline, "the page never loaded"
                time.sleep(0.5)
        shot = tmp_path / "page.png"
        while True:
            driver.save_screenshot(str(shot))
            if "drafter ngram" in _ocr(shot):
                break
            assert time.monotonic() < deadline, "the app never showed its sidebar: " + _ocr(shot)[:300]
            time.sleep(1)
        box = driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea")
        box.send_keys(MESSAGE)
        box.send_keys(Keys.ENTER)
        db = data / "history.sqlite3"
        while not _replies(db):
            assert time.monotonic() < deadline, "no reply was saved"
            time.sleep(1)
        kinds = _replies(db)[0]
        assert kinds and set(kinds) <= {"accepted", "corrected", "bonus", "plain"} and "plain" != "".join(set(kinds))
        time.sleep(1)  # the page draws the last frame
        driver.save_screenshot(str(shot))
        text = _ocr(shot)
        # the sidebar's figures of the reply just made (its block is "last reply" once the reply ended)
        assert "drafter ngram" in text and "tok/s" in text and "last reply" in text, text
        assert re.search(r"acceptance \d+ ?%", text) and re.search(r"mean len \d\.\d\d", text), text
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=30)


def test_serve_passes_the_app_options_on_and_says_what_0000_exposes(capsys):
    """The command each browser tab runs carries the app's options as given; a bad port is one line."""
    from specchat.cli import build_parser

    args = build_parser().parse_args(["--data-dir", "/d", "serve", "--port", "8123", "--draft", "ngram", "--no-auto-k",
                                      "--k", "8"])
    cmd = app_command(args)
    assert cmd.startswith(f"{sys.executable} -m specchat.cli --data-dir /d ")
    assert "--draft ngram" in cmd and "--k 8" in cmd and cmd.endswith("--no-auto-k")
    assert main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--port 0 is not a port number" in err
