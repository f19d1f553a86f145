"""Two real llama-servers in the app (issue 24) and their replies' build stamp, against real servers: server A the
bundled model self-drafted, server B the same model without a draft (tests/remote/conftest.py).

- a reply served by llama-server is stamped with the server's ``/props`` ``build_info`` (and, the server being on
  this machine, this CPU), and ``history stats --by build`` groups it under that build;
- alt+s hands the conversation to server B and back; the sidebar's A/B table has one section per server and sets
  B against A; switching back takes the still-connected session; both servers' replies are saved; a server B that
  cannot be reached leaves A answering;
- the A/B section's line across builds for the real server's pair, from a real SQLite file holding an older
  build's reply of the same pair and CPU.
"""

from __future__ import annotations

import dataclasses

import httpx2 as httpx
import pytest

from specchat.cli import main
from specchat.commands.tui import make_factory
from specchat.config import Settings
from specchat.engine.build import this_cpu
from specchat.engine.conversation import reply_message
from specchat.engine.events import Turn
from specchat.engine.protocol import Message
from specchat.engine.remote import connect
from specchat.history import HistoryStore
from specchat.tui.app import SpecChatApp
from specchat.tui.widgets.ab_table import ABTable
from specchat.tui.widgets.prompt import PromptInput

from .conftest import free_port

pytestmark = pytest.mark.usefixtures("isolated_config")

SIZE = (120, 50)


async def settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    for _ in range(3):
        await pilot.pause()


async def say(pilot, text: str) -> None:
    prompt = pilot.app.query_one(PromptInput)
    prompt.text = text
    prompt.focus()
    await pilot.press("enter")
    await settle(pilot)


def _app(tmp_path, a_url: str, b_url: str, store: HistoryStore) -> SpecChatApp:
    settings = Settings(server_url=a_url, server_b_url=b_url, n_predict=16, data_dir=tmp_path,
                        sampling={"temperature": 0.0})
    return SpecChatApp(make_factory(settings), settings, store, make_factory=make_factory, export_dir=tmp_path)


def test_a_servers_reply_is_stamped_with_its_build_and_grouped_by_it(tmp_path, self_draft_server, capsys):
    build_info = httpx.get(self_draft_server.url + "/props", timeout=10).json()["build_info"]
    session = connect(self_draft_server.url, n_predict=16)
    try:
        turn = next(e for e in session.send("Count from 1 to 5.") if isinstance(e, Turn))
    finally:
        session.close()
    assert turn.build == f"llama-server {build_info}" and build_info
    assert turn.cpu == this_cpu()  # the server is on 127.0.0.1: this machine's CPU
    db = tmp_path / "h.sqlite3"
    with HistoryStore(db) as store:
        conv = store.create_conversation(target=turn.target, draft=turn.drafter)
        store.append_message(conv, Message("user", "Count from 1 to 5."))
        store.append_message(conv, reply_message(turn))
    assert main(["history", "stats", "--db", str(db), "--by", "build"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("llama-server "))
    assert row.split("  ")[0].strip() == f"llama-server {build_info}" and " 1 " in row


async def test_alt_s_switches_between_two_real_servers_and_the_ab_table_compares_them(tmp_path, self_draft_server,
                                                                                    plain_server):
    store = HistoryStore(tmp_path / "history.sqlite3")
    app = _app(tmp_path, self_draft_server.url, plain_server.url, store)
    host_a, host_b = self_draft_server.url.removeprefix("http://"), plain_server.url.removeprefix("http://")
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            first = app.engine
            assert first is not None, app.engine_error
            await say(pilot, "Count from 1 to 5.")
            await pilot.press("alt+s")
            await settle(pilot)
            assert app.engine is not None and app.engine is not first
            assert app.engine.server_info.url == plain_server.url and app.settings.server_url == plain_server.url
            assert app.settings.server_b_url == self_draft_server.url  # the race now races B against A
            await say(pilot, "Count from 1 to 5.")
            text = str(app.query_one(ABTable).render())
            assert f"@ {host_a}" in text and f"@ {host_b}" in text, text
            assert "server B vs A, this session" in text and "B runs at" in text
            a_turn, b_turn = [m.stats for m in app.engine.messages if m.role == "assistant"]
            assert a_turn.draft_n > 0 and b_turn.draft_n == 0  # A drafted, B did not
            await pilot.press("alt+s")  # back to A: the session kept connected, at once
            await pilot.pause()
            await settle(pilot)
            assert app.engine is first
            await say(pilot, "Now count from 6 to 8.")
            assert [m.role for m in app.engine.messages if m.role != "system"] == ["user", "assistant"] * 3
    finally:
        store.close()
    with HistoryStore(tmp_path / "history.sqlite3") as saved:
        (conv,) = saved.list_conversations()
        _, records = saved.records(conv.id)
        targets = [r.target for r in records if r.message.role == "assistant"]
    assert [t.split(" @ ")[1] for t in targets] == [host_a, host_b, host_a]


async def test_a_server_b_that_cannot_be_reached_leaves_a_answering(tmp_path, self_draft_server):
    store = HistoryStore(tmp_path / "history.sqlite3")
    app = _app(tmp_path, self_draft_server.url, f"http://127.0.0.1:{free_port()}", store)
    notes: list[str] = []
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            first = app.engine
            assert first is not None
            app.notify = lambda message, **kw: notes.append(str(message))  # type: ignore[method-assign]
            await pilot.press("alt+s")
            await settle(pilot)
            assert app.engine is first and app.settings.server_url == self_draft_server.url
            assert any("answers again" in n for n in notes), notes
            await say(pilot, "Count from 1 to 3.")
            assert app.engine.messages[-1].role == "assistant" and app.engine.messages[-1].content
    finally:
        store.close()


async def test_the_ab_section_says_the_real_pairs_acceptance_on_an_older_build(tmp_path, self_draft_server,
                                                                             plain_server):
    db = tmp_path / "history.sqlite3"
    store = HistoryStore(db)
    app = _app(tmp_path, self_draft_server.url, plain_server.url, store)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await say(pilot, "Count from 1 to 5.")  # the first reply teaches the session the server's drafter name
            await say(pilot, "Count from 1 to 5 again.")
            turn = app.engine.messages[-1].stats
            assert turn.build.startswith("llama-server ") and turn.draft_n > 0
            assert app.query_one(ABTable).builds_line == ""  # no other build of this pair in the history yet
            older = dataclasses.replace(turn, build="llama-server b1-older", draft_n=100, draft_n_accepted=50)
            with HistoryStore(db) as writer:  # another process's saved reply: the same pair and CPU, an older build
                conv = writer.create_conversation(target=turn.target, draft=turn.drafter)
                writer.append_message(conv, Message("user", "earlier"))
                writer.append_message(conv, reply_message(older))
            await say(pilot, "Count from 6 to 9.")
            last = app.engine.messages[-1].stats
            assert (last.target, last.drafter, last.build, last.cpu) == (turn.target, turn.drafter, turn.build, turn.cpu)
            replies = [m.stats for m in app.engine.messages if m.role == "assistant" and m.stats.drafter == turn.drafter]
            today = sum(t.draft_n_accepted for t in replies) / sum(t.draft_n for t in replies)
            line = app.query_one(ABTable).builds_line
            assert line == f"acceptance with this pair: {today * 100:.0f} % today, 50 % on build llama-server b1-older"
            assert "50 % on build" in str(app.query_one(ABTable).render())
    finally:
        store.close()
