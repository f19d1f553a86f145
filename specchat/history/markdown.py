"""Markdown for people: a conversation rendered to be read on its own (``specchat history show``, the app's
exports), every text in it made inert, and the export files the app writes (named, never overwritten)."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specchat.engine.events import Turn
from specchat.history.records import ConversationRecord, HistoryError, StoredMessage
from specchat.sanitize import sanitize, sanitize_line


# -- export files -------------------------------------------------------------------------------------


def export_slug(title: str, limit: int = 40) -> str:
    """A file-name-safe slug of a title: accents dropped (NFKD), every other run of characters that is not an
    ASCII letter or digit becomes one ``-``, lower case, at most ``limit`` characters; ``chat`` if nothing is left.
    """
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_title.lower()).strip("-")
    if len(slug) > limit:
        slug = slug[:limit].rsplit("-", 1)[0] if "-" in slug[:limit] else slug[:limit]
    return slug.strip("-") or "chat"


def export_filename(conv_id: int | None, title: str, suffix: str = ".md", n: int = 1) -> str:
    """The one naming scheme of exports written by the app: ``specchat-<id>-<slug>.md`` (``specchat-unsaved-...``
    for a chat that is not in the history database); ``n`` > 1 adds ``-n`` before the suffix."""
    stem = f"specchat-{conv_id if conv_id is not None else 'unsaved'}-{export_slug(title)}"
    return f"{stem}{'' if n <= 1 else f'-{n}'}{suffix}"


def write_export(directory: str | Path, conv_id: int | None, title: str, text: str, suffix: str = ".md") -> Path:
    """Write ``text`` to a new file named by :func:`export_filename` in ``directory`` (created if needed).

    Never overwrites: the file is created exclusively (``open(..., "x")``), and a taken name gets ``-2``,
    ``-3``... Returns the full path written; raises :class:`HistoryError` with one line if it cannot write.
    """
    directory = Path(directory).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            path = directory / export_filename(conv_id, title, suffix, n)
            try:
                with open(path, "x", encoding="utf-8") as f:
                    f.write(text)
                return path.absolute()
            except FileExistsError:
                n += 1
    except OSError as exc:
        raise HistoryError(f"cannot write the export to {directory}: {exc.strerror or exc}") from None


# -- Markdown -----------------------------------------------------------------------------------------


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def format_time(stamp: str) -> str:
    """``YYYY-MM-DD HH:MM UTC``; a stamp that is not a date is shown as inert text."""
    try:
        dt = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return sanitize_line(stamp)
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%d %H:%M UTC")


def _num(x: float, fmt: str) -> str:
    return "–" if x is None or not math.isfinite(x) else format(x, fmt)


def k_used(turn: Turn) -> str:
    """The K a turn's drafting rounds used: ``4``, or the range ``2–16`` when it changed (auto-K, a key).

    Turns saved before :class:`Turn` recorded the range (``k_max`` = 0) show the K control they stored.
    """
    if turn.k_max <= 0:
        return str(turn.k)
    return str(turn.k_max) if turn.k_min == turn.k_max else f"{turn.k_min}\u2013{turn.k_max}"


def _stat_cells(record: StoredMessage) -> dict[str, str]:
    t = record.message.stats
    assert t is not None
    if t.draft_n:
        acceptance = f"{_num(None if t.acceptance is None else t.acceptance * 100, '.1f')} % ({t.draft_n_accepted}/{t.draft_n})"
        mean_len = _num(t.mean_len, ".2f")
    else:
        acceptance, mean_len = "–", "–"
    k = k_used(t) + (" auto" if record.auto_k else "")
    drafter = t.drafter if t.speculative or t.draft_n else (t.drafter + " (off)" if t.drafter else "off")
    return {
        "tok/s": _num(t.predicted_per_second, ".1f"),
        "acceptance": acceptance,
        "mean len": mean_len,
        "K": k if t.speculative or t.draft_n else "–",
        "drafter": sanitize_line(drafter),
        "tokens": str(t.predicted_n),
        "prompt": f"{t.prompt_n} tok / {_num(t.prompt_ms, '.0f')} ms",
        "stop": sanitize_line(t.stop_reason),
    }


def _stat_summary(record: StoredMessage) -> str:
    cells = _stat_cells(record)
    t = record.message.stats
    assert t is not None
    summary = f"{cells['tok/s']} tok/s"
    if t.draft_n:
        summary += f" · acceptance {cells['acceptance']} · mean len {cells['mean len']} · K {cells['K']}"
    return summary + f" · {cells['drafter']}"


def render_markdown(conv: ConversationRecord, records: Sequence[StoredMessage]) -> str:
    """A conversation as Markdown readable on its own: title, model pair, messages, per-turn stats table.

    For people (``specchat history show`` prints it on the terminal): every text in it is made inert
    (:mod:`specchat.sanitize`); the JSON export is the lossless form.
    """
    title = sanitize_line(conv.title) or f"Conversation {conv.id}"
    lines = [f"# {title}", ""]
    pair = f"target `{sanitize_line(conv.target) or '?'}`, draft `{sanitize_line(conv.draft) or '?'}`"
    lines += [
        f"- **Model pair:** {pair}",
        f"- **Created:** {format_time(conv.created)} · **updated:** {format_time(conv.updated)}",
        f"- **Messages:** {len(records)}",
    ]
    if conv.system_prompt and not any(r.message.role == "system" for r in records):
        lines.append(f"- **System prompt:** {sanitize_line(conv.system_prompt)}")
    lines.append("")
    turns: list[tuple[str, StoredMessage]] = []
    for number, record in enumerate(records, start=1):
        m = record.message
        lines += ["---", "", f"### {number}. {m.role.capitalize()}", ""]
        lines.append(sanitize(m.content) if m.content else "*(empty)*")
        lines.append("")
        if m.stopped:
            lines += ["*(stopped before the end)*", ""]
        if m.stats is not None:
            lines += [f"*{_stat_summary(record)}*", ""]
            turns.append((str(number), record))
        if record.alternates:
            versions = record.version_records()
            chosen = m.alternate_index
            lines += [
                f"*Other versions of this reply (regenerated): the conversation continues from version {chosen + 1} "
                f"of {len(versions)}, above.*",
                "",
            ]
            for j, version in enumerate(versions):
                if version is record:
                    continue
                vm = version.message
                lines += [f"#### {number}. Version {j + 1} of {len(versions)}", ""]
                lines.append(sanitize(vm.content) if vm.content else "*(empty)*")
                lines.append("")
                if vm.stopped:
                    lines += ["*(stopped before the end)*", ""]
                if vm.stats is not None:
                    lines += [f"*{_stat_summary(version)}*", ""]
                    turns.append((f"{number} (v{j + 1})", version))
    if turns:
        header = ["#", "tok/s", "acceptance", "mean len", "K", "drafter", "tokens", "prompt", "stop"]
        lines += ["---", "", "## Turn statistics", ""]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join("---:" if h not in ("drafter", "stop") else "---" for h in header) + "|")
        for number, record in turns:
            cells = _stat_cells(record)
            lines.append("| " + " | ".join(_cell(v) for v in [number, *(cells[h] for h in header[1:])]) + " |")
        lines.append("")
        lines.append(
            "tok/s = generated tokens per second of the reply; acceptance = draft tokens kept / drafted; "
            "mean len = tokens per verify step (1 + accepted / steps with a draft), as llama.cpp reports it."
        )
        lines.append("")
    return "\n".join(lines)
