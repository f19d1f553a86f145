"""Loading: :class:`specchat.config.Settings` in, a ready conversation out - a
:class:`~specchat.engine.chat.ChatSession` on local models, or, with ``server_url`` set, a
:class:`~specchat.engine.remote.RemoteSession` on that llama-server.

It sits above :mod:`specchat.engine`, :mod:`specchat.models` and :mod:`specchat.config` (the layers in
``pyproject.toml``'s import contract): the engine knows nothing of settings files or model names.

Validates both files (:mod:`specchat.engine.gguf`), loads the target, loads a draft model if one is
configured and checks it against the target (llama.cpp's five vocab rules, :mod:`specchat.engine.compat`),
and always offers the n-gram drafter; ``draft = "suffix"`` adds the suffix drafter with the history's index
(:func:`suffix_drafter`), and a chain (``suffix,DRAFT.gguf``) its free links ahead of the draft model
(:func:`drafter_chain`). ``n_batch`` is at least K_max + 1 so a verify batch is one decode.
The target's weights go where the ``repack`` setting says (:func:`repack_for`),
and its verify-cost calibration is kept in ``<data dir>/calibration`` (:mod:`specchat.engine.calibration_cache`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.engine.calibration_cache import CALIBRATION_DIR, CalibrationCache, cpu_identity
from specchat.engine.chat import ChatSession
from specchat.engine.chain import DrafterChain
from specchat.engine.compat import VocabSummary, require_compatible
from specchat.engine.controls import Controls, ControlState, SamplingParams
from specchat.engine.drafter_kinds import K_MAX, MODEL, NGRAM, NONE, SUFFIX
from specchat.engine.drafters import Drafter, ModelDrafter, NgramDrafter
from specchat.engine.suffix_drafter import SuffixDrafter
from specchat.engine.gguf import read_gguf_info
from specchat.engine.kernels import AMX_FORMATS
from specchat.engine.model import Model, extra_buffer_types_safe
from specchat.engine.speculative import SpeculativeDecoder
from specchat.errors import UserError
from specchat.models.registry import resolve_pair
from specchat.models.tune_results import load_results, repack_measure

if TYPE_CHECKING:
    from specchat.config import Settings
    from specchat.engine.remote import RemoteSession

Progress = Callable[[float, str], None]


def sampling_from(settings: Settings) -> SamplingParams:
    s = settings.sampling
    try:
        return SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, seed=s.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


def connect_server_b(settings: Settings, progress: Progress | None = None) -> RemoteSession:
    """A conversation on server B (``server_b_url``), set up like server A's (:func:`load_engine`): the other
    side of a race or a bench of two llama-servers. :class:`UserError` when server B is not set or server A
    is not (:func:`specchat.config.server_pair`); one line naming server B when it cannot be reached."""
    from specchat.config import server_pair
    from specchat.engine.llama_server import ServerError
    from specchat.engine.remote import connect

    pair = server_pair(settings)
    if pair is None:
        raise UserError("no server B is set: give --server-b URL (or server_b_url)")
    try:
        return connect(
            pair[1], system_prompt=settings.system_prompt, n_predict=settings.n_predict,
            sampling=sampling_from(settings), progress=progress,
        )
    except ServerError as exc:
        raise ServerError(f"server B: {exc}") from None


def repack_for(setting: str, weights: str, speculates: bool, measured: str | None = None) -> bool | None:
    """Whether to load a target with llama.cpp's extra buffer types, for the ``repack`` setting.

    ``"on"``/``"off"`` say so. ``"auto"`` (None: llama.cpp's default, on) wherever multi-row batches of the
    extra buffer types are safe - unless ``measured`` is ``"off"``: a ``specchat models tune`` of this file on this
    CPU at these threads found it faster without them (:func:`specchat.models.tune_results.repack_measure`; the
    AMD EPYCs here decode the bundled Q4_1 4-10 % faster so); on a CPU where they crash (:func:`specchat.engine.model.extra_buffer_types_safe`) the target
    then decodes one row at a time (:attr:`specchat.engine.model.Model.row_by_row`), which only pays when
    nothing is verified in batches and the format has the fast one-row AMX kernels: on for a session that
    does not speculate (``speculates`` False: ``draft = "none"``, or a fixed K = 0) with weights in
    :data:`specchat.engine.kernels.AMX_FORMATS`, off otherwise. ``specchat models tune`` measures both for a file.
    """
    if setting == "on":
        return True
    if setting == "off":
        return False
    if extra_buffer_types_safe():
        return False if measured == "off" else None
    return (not speculates) and weights.upper() in AMX_FORMATS


def flash_attn_for(setting: str) -> bool | None:
    """:class:`~specchat.engine.model.Model`'s ``flash_attn`` for the ``flash_attn`` setting (None: llama.cpp's
    ``auto``)."""
    return None if setting == "auto" else setting == "on"


def load_engine(
    settings: Settings, progress: Progress | None = None, *, auto_k: bool | None = None
) -> ChatSession | RemoteSession:
    """Load the configured target and drafter(s) and return a ready conversation.

    With ``settings.server_url`` the replies come from that llama-server, whose own flags set the models
    and speculation. Locally, in order: the target (:func:`_load_target`), the free drafters, the draft model
    if one is configured (:func:`_load_draft_model`; the target is closed if it fails), the controls, the
    round loop.
    """
    report = progress or (lambda f, what: None)
    server_url = settings.server_url
    if server_url:
        from specchat.engine.remote import connect

        return connect(
            server_url, system_prompt=settings.system_prompt, n_predict=settings.n_predict,
            sampling=sampling_from(settings), progress=report,
        )
    data_dir = settings.effective_data_dir()
    pair = resolve_pair(settings.target, settings.draft, data_dir)
    draft_path: Path | None = pair.draft if pair.drafter == MODEL else None
    n_batch = max(512, K_MAX + 1)
    share = 0.75 if draft_path else 1.0  # of the loading progress: the target's, the rest the draft's
    auto = settings.auto_k if auto_k is None else auto_k
    # a session speculates unless it has no drafter, or K = 0 is fixed (0 = plain decoding)
    speculates = pair.drafter != NONE and (auto or settings.k > 0)
    target, kernels = _load_target(settings, pair.target, n_batch, speculates,
                                   lambda f, what: report(f * share, what))
    drafters: dict[str, Drafter] = {NGRAM: NgramDrafter(settings.ngram.min_n, settings.ngram.max_n)}
    if not target.is_recurrent:  # offered beside any drafter (the app's drafter menu); its history read once chosen
        drafters[SUFFIX] = suffix_drafter(settings, target, lazy=pair.drafter != SUFFIX)
    selected = pair.drafter if pair.drafter in (NGRAM, SUFFIX, NONE) else None
    if draft_path is not None:
        try:
            name, drafter = _load_draft_model(
                settings, target, pair.target, draft_path, n_batch,
                lambda f, what: report(share + f * (1 - share), what),
            )
        except Exception:
            target.close()
            raise
        link: Drafter = drafter
        if pair.chain:  # free links first, the draft model last
            link = drafter_chain(settings, target, pair.chain, drafter)
        drafters[link.name] = link
        selected = link.name
    if target.is_recurrent and selected != NONE:
        selected = NONE  # the default n-gram drafter: fall back to plain decoding, said in info().note
    controls = Controls(ControlState(k=settings.k, speculative=selected != NONE, auto_k=auto, drafter=None,
                                     sampling=sampling_from(settings)))
    cache = CalibrationCache(data_dir / CALIBRATION_DIR)
    decoder = SpeculativeDecoder(target, drafters, controls, drafter=selected, calibration_cache=cache)
    report(1.0, "models loaded")  # not "ready": the app is ready once it has taken the engine
    return ChatSession(
        decoder,
        system_prompt=settings.system_prompt,
        n_predict=settings.n_predict,
        seed=settings.sampling.seed,
        draft_label=selected or NONE,
        kernels=kernels,
    )


def _load_target(settings: Settings, path: Path, n_batch: int, speculates: bool,
                 report: Progress) -> tuple[Model, str]:
    """The target model, its file validated first (``report``: its share of the loading progress), and the
    sidebar's line on its kernels when a saved tune decided them (:meth:`RepackMeasure.words
    <specchat.models.tune_results.RepackMeasure.words>`, else "")."""
    report(0.0, f"loading {path.name}")
    weights = read_gguf_info(path).quantization  # validates the file before anything is loaded
    measure = None
    if settings.repack == "auto" and extra_buffer_types_safe():  # a tune may have measured llama.cpp's default
        measure = repack_measure(load_results(settings.effective_data_dir()), path, cpu=cpu_identity(),
                                 threads=settings.threads, flash_attn=settings.flash_attn, speculates=speculates)
    model = Model(
        path, n_ctx=settings.n_ctx, n_batch=n_batch, threads=settings.threads, threads_batch=settings.threads_batch,
        repack=repack_for(settings.repack, weights, speculates=speculates,
                          measured=measure.setting if measure else None),
        flash_attn=flash_attn_for(settings.flash_attn), progress=lambda f: report(f, f"loading {path.name}"),
    )
    return model, measure.words() if measure else ""


def _load_draft_model(
    settings: Settings, target: Model, target_path: Path, draft_path: Path, n_batch: int, report: Progress
) -> tuple[str, ModelDrafter]:
    """The draft model as a drafter, and its name: refused for a recurrent target or draft (their KV cannot be
    rolled back) and for a vocabulary the target's does not match (:func:`require_compatible`); the draft
    model is closed when refused."""
    if target.is_recurrent:
        raise UserError(
            f"{target_path.name} is a recurrent/hybrid model: its KV cache cannot be partly removed, so it "
            "cannot verify drafts; run it with speculation off (--draft none)"
        )
    draft_model = Model(
        draft_path, n_ctx=settings.n_ctx, n_batch=n_batch, threads=settings.threads,
        threads_batch=settings.threads_batch, flash_attn=flash_attn_for(settings.flash_attn),
        progress=lambda f: report(f, f"loading {draft_path.name}"),
    )
    try:
        if draft_model.is_recurrent:
            raise UserError(
                f"{draft_path.name} is a recurrent/hybrid model: its KV cache cannot be rolled back after "
                f"a rejected draft; pick a transformer draft, '{NGRAM}' or '{NONE}'"
            )
        require_compatible(
            VocabSummary.from_llama_vocab(target.vocab, str(target_path)),
            VocabSummary.from_llama_vocab(draft_model.vocab, str(draft_path)),
        )
    except Exception:
        draft_model.close()
        raise
    name = draft_path.name if draft_path.name != NGRAM else f"{draft_path.name} (model)"
    return name, ModelDrafter(draft_model, name)


def drafter_chain(settings: Settings, target: Model, free: tuple[str, ...], model: Drafter) -> DrafterChain:
    """The chain ``free`` links (``ngram``, ``suffix``: each its own drafter, set up as when it drafts alone) then
    ``model`` (:mod:`specchat.engine.chain`), named as it was written: ``suffix,draft.gguf``."""
    links: list[Drafter] = []
    for kind in free:
        links.append(suffix_drafter(settings, target) if kind == SUFFIX else NgramDrafter(settings.ngram.min_n,
                                                                                         settings.ngram.max_n))
    return DrafterChain([*links, model])


def tokenizer_fingerprint(target: Model) -> str:
    """A hash of the target's vocabulary (its type and every token's text): targets of one family share it, and so
    share one suffix index; another family gets its own (:func:`specchat.history.corpus.index_path`)."""
    import hashlib

    summary = VocabSummary.from_llama_vocab(target.vocab, str(target.path))
    h = hashlib.sha256(f"{summary.vocab_type}:{summary.n_tokens}:".encode())
    for text in summary.texts:
        h.update(len(text).to_bytes(4, "little"))
        h.update(text)
    return h.hexdigest()


class LazyCorpus:
    """The history index of a ``suffix`` drafter offered beside the chosen one (the app's drafter menu lists it, as it
    lists ``ngram``): its :class:`~specchat.history.corpus.HistoryCorpus` starts the first time the drafter looks
    something up, so a session that never drafts with it neither reads nor tokenises the history (a first build
    tokenises at ~0.1 M tokens/s here: :mod:`specchat.history.corpus`). Until the build is done it drafts like
    n-gram, as the eager one does; its progress reaches the app's sidebar from then on, as an eager one's does from
    the load (:func:`specchat.history.index_progress.watch`)."""

    def __init__(self, start: Callable[[], Any]) -> None:
        self._start = start
        self._corpus: Any = None
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        return self._corpus is not None

    def __call__(self) -> Any:
        with self._lock:
            if self._corpus is None:
                self._corpus = self._start()
        return self._corpus.index()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the first build is done, once started (:meth:`HistoryCorpus.wait`); not started: False."""
        return self._corpus.wait(timeout) if self._corpus is not None else False

    def settle(self, timeout: float = 10.0) -> bool:
        """Once started, :meth:`HistoryCorpus.settle`; not started: False."""
        return self._corpus.settle(timeout) if self._corpus is not None else False

    @property
    def notices(self) -> list[str]:
        return list(self._corpus.notices) if self._corpus is not None else []

    def close(self) -> None:
        if self._corpus is not None:
            self._corpus.close()


def suffix_drafter(settings: Settings, target: Model, *, lazy: bool = False) -> SuffixDrafter:
    """The ``suffix`` drafter for ``target``: n-gram settings for the conversation, and (unless ``suffix.corpus`` is
    off) the history's index, loaded or built on a thread of its own (:class:`specchat.history.corpus.HistoryCorpus`)
    so nothing here waits for it; closing the drafter saves the index. Messages are indexed without an end token:
    the end-of-turn id a chat template closes a reply with is not the vocabulary's ``eot`` for every family
    (SmolLM2's is ``<|endoftext|>``, 0, while its replies end with ``<|im_end|>``, 2), and a document's end already
    stops a draft. ``lazy``: the index starts the first time the drafter is used (:class:`LazyCorpus`)."""
    from specchat.history.corpus import HistoryCorpus, index_path

    s = settings.suffix

    def start() -> HistoryCorpus:
        fingerprint = tokenizer_fingerprint(target)
        return HistoryCorpus(
            settings.history_path(), index_path(settings.effective_data_dir(), fingerprint),
            lambda text: target.tokenize(text, add_bos=False, special=False),
            fingerprint=fingerprint, exclude=s.exclude,
        ).start()

    corpus: Any = None
    if s.corpus:
        corpus = LazyCorpus(start) if lazy else start()
    return SuffixDrafter(
        corpus, settings.ngram.min_n, settings.ngram.max_n, max_spec_factor=s.max_spec_factor,
        min_token_prob=s.min_token_prob, on_close=corpus.close if corpus is not None else None,
    )


def wait_for_history(session: ChatSession | RemoteSession, timeout: float | None = None) -> list[str]:
    """Block until a ``suffix`` drafter's history index (alone or a chain's link) is built (``specchat generate`` measures with it); the
    notices said on the way (a rebuilt index). Nothing to wait for: []."""
    decoder = getattr(session, "decoder", None)
    chosen = decoder.drafter if decoder is not None else None
    links = chosen.links if isinstance(chosen, DrafterChain) else [chosen]  # not a suffix drafter merely offered
    corpus = next((d.corpus for d in links if isinstance(d, SuffixDrafter) and d.corpus is not None), None)
    if corpus is None or not hasattr(corpus, "wait"):
        return []
    corpus.wait(timeout)
    return list(corpus.notices)


def measure_verify_cost(settings: Settings) -> tuple[float, list[float]]:
    """The target of ``settings`` on this CPU as auto-K prices it: (t1 ms, v by K), from the calibration cache
    when this file was timed here before, else timed now (:func:`specchat.engine.calibration.verify_cost_for`,
    every calibration size after a short prompt) and cached. The demo picks its helps pair by it
    (:func:`specchat.demo.pick_helps_pair`)."""
    from specchat.engine.calibration import verify_cost_for
    from specchat.engine.telemetry import CostModel

    session = load_engine(settings.model_copy(update={"server_url": None}))
    try:
        decoder = session.decoder  # type: ignore[union-attr]
        target = decoder.target
        target.clear()
        tokens = target.tokenize("Copy this line and the next one exactly.", add_bos=True)
        target.decode(tokens[:-1], logits_last=0)
        cm = CostModel()
        verify_cost_for(target, cm, tokens[-1], decoder.calibration_cache)
        return cm.target_ms() or 0.0, list(cm.verify.table())
    finally:
        session.close()

