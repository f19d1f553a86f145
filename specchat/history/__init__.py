"""Saved conversations: one SQLite database (stdlib :mod:`sqlite3`) in the user data dir.

One concept per module:

* :mod:`~specchat.history.schema` - the tables, their schema versions and the migrations (:func:`migrate`);
* :mod:`~specchat.history.records` - what the history hands out (:class:`ConversationRecord`,
  :class:`StoredMessage`, :class:`SearchHit`) and its errors (:class:`HistoryError`);
* :mod:`~specchat.history.store` - :class:`HistoryStore`, the database itself (durability: one transaction
  per message);
* :mod:`~specchat.history.exchange` - the JSON export format, and an import validated field by field
  (:func:`parse_export`);
* :mod:`~specchat.history.markdown` - a conversation as Markdown for people (:func:`render_markdown`) and the
  export files the app writes (:func:`write_export`).

Untrusted text: an import file or a hand-edited database may hold anything. Imports are validated field by field
(:func:`parse_export`: dates are ISO 8601 dates, roles, token kinds and stop reasons come from their known sets,
every string is valid Unicode) and their one-line labels (title, model names, drafter) are cleaned with
:func:`specchat.sanitize.sanitize_line`; labels read back from the database are cleaned the same way. Message
text is stored exactly as written (a reply's text must stay consistent with its tokens) and made inert where
it is shown: :func:`render_markdown` and every CLI and TUI display go through :mod:`specchat.sanitize`.

Timestamps are ISO 8601 UTC strings. Export formats: :meth:`HistoryStore.export_json` (lossless; imported
by :meth:`HistoryStore.import_json` and readable with :func:`messages_from_export` for
``specchat generate --conversation FILE.json``) and :meth:`HistoryStore.export_markdown` (for people).

The names below are the package's public API; import them from here.
"""

from specchat.history.exchange import (
    EXPORT_FORMAT, EXPORT_VERSION, STOP_REASONS, build_export, export_messages, messages_from_export, parse_export,
    read_export_file,
)
from specchat.history.markdown import export_filename, export_slug, format_time, k_used, render_markdown, write_export
from specchat.history.records import (
    ConversationRecord, HistoryError, SearchHit, StoredMessage, UnknownConversationError, default_title, now_iso,
)
from specchat.history.schema import APPLICATION_ID, MAX_ID, MIGRATIONS, ROLES, SCHEMA_VERSION, migrate
from specchat.history.store import HistoryStore

__all__ = [
    "APPLICATION_ID",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "MAX_ID",
    "MIGRATIONS",
    "ROLES",
    "SCHEMA_VERSION",
    "STOP_REASONS",
    "ConversationRecord",
    "HistoryError",
    "HistoryStore",
    "SearchHit",
    "StoredMessage",
    "UnknownConversationError",
    "build_export",
    "default_title",
    "export_filename",
    "export_messages",
    "export_slug",
    "format_time",
    "k_used",
    "messages_from_export",
    "migrate",
    "now_iso",
    "parse_export",
    "read_export_file",
    "render_markdown",
    "write_export",
]
