"""``python tests/terminal/fakeapp.py --db PATH``: the real app (SpecChatApp, real HistoryStore in PATH) on the fake
engine of ``tests/tui/fake_engine.py``, for pty tests of input handling that must not depend on a model's speed.

Everything but the engine is what ``specchat`` runs: the same App class, stylesheet, keys and SQLite history.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tui"))

from fake_engine import FakeEngine  # noqa: E402
from tuikit import fake_settings  # noqa: E402

from specchat.history import HistoryStore  # noqa: E402
from specchat.tui.app import SpecChatApp  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, type=Path)
    parser.add_argument("--reply", default="A short fake reply.")
    args = parser.parse_args()
    engine = FakeEngine([args.reply])
    store = HistoryStore(args.db)
    app = SpecChatApp(lambda progress: engine, fake_settings(), store, export_dir=args.db.parent)
    try:
        app.run()
    finally:
        store.close()
    return int(app.return_code or 0)


if __name__ == "__main__":
    sys.exit(main())
