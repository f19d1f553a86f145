"""The bench's workload with history (``specchat bench --suite history``, issue 23): earlier conversations of one kind
of task are saved first, then new tasks of the same kind are measured - the ``suffix`` drafter against ``ngram``
and plain decoding.

People who use a chat app every day ask the same kind of thing again: the same helper for another field, the same
report for another month. The tasks here are one such family: a Python function over a list of records, for
another field and another statistic each time. The earlier replies are the model's own (greedy, speculation off, so
they are exactly what plain decoding says), saved as conversations in a history database of the bench's own (a
temporary data dir, removed afterwards: never the user's history), whose suffix index the measured session's
``suffix`` drafter copies from; ``ngram`` sees only the new conversation. The measured tasks (:data:`NEW_TASKS`, the
family's last ones: one per statistic) are never among the earlier ones. One task was measured until 2026-12-05, and
one task is one draw: replayed over the family (each of its 25 tasks against the other 24 as history, the F16
re-encoding's greedy replies and verify costs on an AMD EPYC Zen 4, flash attention off, ``--threads 1``;
``tests/engine/test_history_replay.py``) suffix ÷ n-gram with auto-K ranges 1.01-1.44 per task (geometric mean 1.15),
and the task measured alone until then is at 1.15.

Beside them, one entry asks an earlier task again (:data:`ASKED_AGAIN`): the same question in a new conversation, its
whole reply saved - the most a history can give, measured as its own row, never pooled with the new tasks.

``--history-size N`` sets how many earlier conversations (default :data:`DEFAULT_EARLIER`, the issue's "at least 20";
a test uses 3).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specchat.errors import UserError
from specchat.race import RaceCancelled

#: the suite's name for ``--suite``
HISTORY_SUITE = "history"
#: earlier conversations saved before the measured task, by default
DEFAULT_EARLIER = 20
#: the measured tasks: the family's last ones, one per statistic (:data:`_STATS`)
NEW_TASKS = 4

_FIELDS = (
    "price", "weight", "age", "score", "height", "salary", "rating", "distance", "duration", "temperature",
    "volume", "speed", "balance", "quantity", "discount", "population", "area", "budget", "latency", "voltage",
    "pressure", "humidity", "altitude", "capacity", "revenue",
)
_STATS = ("average", "largest", "smallest", "total")


def task(i: int) -> str:
    """The i-th task of the family (a field and a statistic each; the same wording around them)."""
    field = _FIELDS[i % len(_FIELDS)]
    stat = _STATS[i % len(_STATS)]
    return (
        f"Write a Python function named {stat}_{field} that takes a list of records (dictionaries) and returns the "
        f"{stat} of their '{field}' values, skipping records that have no '{field}'. Include a docstring."
    )


#: the entry that asks the family's first task, always among the earlier ones, again
ASKED_AGAIN = "history-asked-again"
#: the most earlier conversations the family can give (every task distinct, the measured ones apart)
MAX_EARLIER = len(_FIELDS) - NEW_TASKS


def task_name(i: int) -> str:
    """The i-th task's entry name in the bench's tables: ``history-`` and its function's name."""
    return f"history-{_STATS[i % len(_STATS)]}_{_FIELDS[i % len(_FIELDS)]}"


def history_suite() -> list[dict[str, str]]:
    """The measured entries: the family's last :data:`NEW_TASKS` tasks, never among the earlier ones, then its
    first task asked again (:data:`ASKED_AGAIN`)."""
    new = [{"name": task_name(i), "prompt": task(i)} for i in range(MAX_EARLIER, len(_FIELDS))]
    return [*new, {"name": ASKED_AGAIN, "prompt": task(0)}]


def earlier_tasks(n: int) -> list[str]:
    """The ``n`` tasks saved before the measured one; :class:`UserError` when ``n`` is out of range."""
    if not 1 <= n <= MAX_EARLIER:
        raise UserError(f"--history-size {n} must be 1..{MAX_EARLIER} (earlier conversations saved before the task)")
    return [task(i) for i in range(n)]


class BenchHistory:
    """The bench's own data dir (a temporary directory, removed by :meth:`close`) and its history database."""

    def __init__(self) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="specchat-bench-history-"))

    @property
    def db_path(self) -> Path:
        from specchat.config.schema import HISTORY_FILENAME

        return self.data_dir / HISTORY_FILENAME

    def close(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)


def bench_settings(settings: Any, history: BenchHistory | Path) -> Any:
    """``settings`` for the measured session (``history``: the bench's data dir, or another own directory: the
    tour's): the same models (resolved in the user's data dir first, so a derived or
    downloaded name still finds its file), the bench's data dir, and the ``suffix`` drafter unless a chain or
    ``suffix`` was asked for (``ngram``, the default, is what it is compared against anyway)."""
    from specchat.engine.drafter_kinds import CHAIN_SEP, NGRAM, NONE, SUFFIX, chain_links
    from specchat.models.registry import resolve_model, resolve_pair

    own_dir = history.data_dir if isinstance(history, BenchHistory) else Path(history)
    data_dir = settings.effective_data_dir()
    pair = resolve_pair(settings.target, settings.draft, data_dir)  # checks every file (one line if missing)
    draft = settings.draft.strip()
    if draft.lower() in (NGRAM, NONE):
        draft = SUFFIX
    elif chain_links(draft):
        links = chain_links(draft)
        draft = CHAIN_SEP.join([*links[:-1], str(pair.draft)])
    elif draft.lower() != SUFFIX:
        raise UserError(
            f"--suite {HISTORY_SUITE} measures the {SUFFIX} drafter (or a chain like {SUFFIX},DRAFT.gguf) against "
            f"{NGRAM}: --draft {draft} is a draft model alone; give --draft {SUFFIX}{CHAIN_SEP}{draft}"
        )
    suffix = settings.suffix.model_copy(update={"corpus": True, "exclude": []})  # this history is all its own
    return settings.model_copy(update={"target": str(resolve_model(settings.target, data_dir)), "draft": draft,
                                       "data_dir": own_dir, "suffix": suffix})


def seed_history(session: Any, db_path: Path, prompts: list[str], progress: Callable[[int, int, str], None],
                 cancelled: Callable[[], bool] = lambda: False) -> int:
    """Generate a reply to each of ``prompts`` with ``session`` (greedy, speculation off: plain decoding's text) and
    save each as a conversation in ``db_path``; wait until the suffix drafter's index holds them. The conversations
    saved.

    ``cancelled()`` (the tour's Esc, the app quitting) is asked before each conversation and at each event of a
    reply, so a cancel lands within one round, not after every reply is generated (seconds to minutes on this
    CPU, issue 23): the reply in flight is asked to stop (``controls.request_stop``: at its next round boundary,
    caches consistent) and :class:`~specchat.race.RaceCancelled` is raised, the session's controls restored. A
    conversation is saved only once its reply is complete, so a cancel leaves the finished ones and never half of
    one; a reply ended by any other stop request is a cancel too (its text is cut short)."""
    from specchat.engine.controls import SamplingParams
    from specchat.engine.protocol import Message
    from specchat.history import HistoryStore

    controls = session.controls
    before = controls.snapshot()
    wait_for_index(session)  # the (empty) index first, so every saved reply arrives as an addition
    controls.set_speculative(False)
    controls.set_sampling(SamplingParams(temperature=0.0, top_k=before.sampling.top_k, top_p=before.sampling.top_p))
    saved = 0
    try:
        with HistoryStore(db_path) as store:
            for i, prompt in enumerate(prompts):
                if cancelled():
                    raise RaceCancelled
                progress(i, len(prompts), f"saving earlier conversation {i + 1}/{len(prompts)}")
                session.reset()
                turn = _reply(session, prompt, cancelled)
                if turn is None or turn.stop_reason == "error" or not turn.text.strip():
                    continue  # no reply, or a remote one cut short by its server's failure: nothing whole to save
                conv = store.create_conversation(title=f"earlier task {i + 1}")
                store.append_message(conv, Message("user", prompt))
                store.append_message(conv, Message("assistant", turn.text))
                saved += 1
    finally:
        controls.set_sampling(before.sampling)
        controls.set_speculative(before.speculative)
        session.reset()
    wait_for_index(session, settle=True)
    return saved


def _reply(session: Any, prompt: str, cancelled: Callable[[], bool]) -> Any:
    """The reply's :class:`~specchat.engine.events.Turn` (None if none came); a stop is asked for at the first event
    after ``cancelled()`` says yes, and :class:`~specchat.race.RaceCancelled` raised once the reply has ended."""
    from specchat.engine.events import Turn

    turn = None
    for event in session.send(prompt):
        if isinstance(event, Turn):
            turn = event
        elif cancelled():
            session.controls.request_stop()
    if cancelled() or (turn is not None and turn.stop_reason == "stopped"):
        raise RaceCancelled
    return turn


def _corpora(session: Any) -> list[Any]:
    """The history corpora of ``session``'s drafters (a suffix drafter alone or a chain's link), by what they do:
    the tour's screen imports this module, and the TUI never imports the engine's drafters (llama_cpp)."""
    links = getattr(getattr(session, "decoder", None), "links", {})
    return [c for d in links.values() if (c := getattr(d, "corpus", None)) is not None and hasattr(c, "wait")]


def wait_for_index(session: Any, *, settle: bool = False, timeout: float = 60.0) -> None:
    """Until every history index of ``session`` is built (``settle``: and holds every conversation saved so far)."""
    for corpus in _corpora(session):
        if settle:
            corpus.settle(timeout)
        else:
            corpus.wait(timeout)


__all__ = [
    "ASKED_AGAIN", "DEFAULT_EARLIER", "HISTORY_SUITE", "MAX_EARLIER", "NEW_TASKS", "BenchHistory", "bench_settings", "earlier_tasks",
    "history_suite", "seed_history", "task", "task_name", "wait_for_index",
]
