"""``python tests/terminal/fakeapp.py --db PATH``: the real app (SpecChatApp, real HistoryStore in PATH) on the fake
engine of ``tests/tui/fake_engine.py``, for pty tests of input handling that must not depend on a model's speed.

Everything but the engine is what ``specchat`` runs: the same App class, stylesheet, keys, terminal driver, Esc
delay (``ESCDELAY``, set as the ``specchat`` command sets it) and SQLite history. ``--step-ms`` makes each
round of the fake engine take that long (on the engine thread, as a real round does), so a reply streams for a
while; ``--words N`` makes its reply N words long.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specchat.commands.tui import set_escape_delay

set_escape_delay()  # before Textual is imported: its parser reads ESCDELAY once

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tui"))

from fake_engine import FakeEngine  # noqa: E402
from tuikit import fake_settings  # noqa: E402

from specchat.engine.events import Step  # noqa: E402
from specchat.history import HistoryStore  # noqa: E402
from specchat.tui.app import SpecChatApp  # noqa: E402


class PacedEngine(FakeEngine):
    """The fake engine, each round taking ``step_s`` on the engine thread (after its Step is emitted)."""

    def __init__(self, replies: list[str], step_s: float) -> None:
        super().__init__(replies)
        self.step_s = step_s

    def send(self, user_text: str):
        return self._paced(super().send(user_text))

    def _paced(self, events):
        for event in events:
            yield event
            if isinstance(event, Step) and self.step_s > 0:
                time.sleep(self.step_s)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, type=Path)
    parser.add_argument("--reply", action="append", help="a reply (given again: the replies in turn, the last repeats)")
    parser.add_argument("--words", type=int, default=0, help="a reply of this many words instead of --reply")
    parser.add_argument("--step-ms", type=float, default=0.0, help="each round takes this long")
    args = parser.parse_args()
    replies = [" ".join(f"word{i}" for i in range(args.words)) + "."] if args.words else args.reply
    engine = PacedEngine(replies or ["A short fake reply."], args.step_ms / 1000.0)
    store = HistoryStore(args.db)
    app = SpecChatApp(lambda progress: engine, fake_settings(), store, export_dir=args.db.parent)
    try:
        app.run()
    finally:
        store.close()
    return int(app.return_code or 0)


if __name__ == "__main__":
    sys.exit(main())
