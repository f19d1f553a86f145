"""What the app remembers between runs of its own accord: the chosen theme and whether the sidebar is shown.

Kept in a small JSON file next to ``config.toml`` (:func:`specchat.config.state_path`), never in the user's
``config.toml`` itself, which stays exactly as the user wrote it. Precedence of the theme: a ``--theme``
flag, else the theme last chosen in the app (this file), else the config's ``theme``. A missing or
unreadable file means "nothing remembered"; a file that cannot be written is reported once by the app,
and the choice still holds for the session.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class UiState:
    theme: str | None = None
    sidebar: bool | None = None  # None: never toggled (shown when the terminal is wide enough)


def load_state(path: Path | None) -> tuple[UiState, str | None]:
    """The remembered state, and a one-line problem if the file exists but cannot be used."""
    if path is None or not path.exists():
        return UiState(), None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        return UiState(), f"ignored {path} ({exc}); it is rewritten at the next theme or sidebar change"
    theme = data.get("theme")
    sidebar = data.get("sidebar")
    return UiState(
        theme=theme if isinstance(theme, str) and theme else None,
        sidebar=sidebar if isinstance(sidebar, bool) else None,
    ), None


def save_state(path: Path, state: UiState) -> None:
    """Write ``state`` atomically (a temporary file renamed over the old one). Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
