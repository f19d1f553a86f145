"""Can this draft model serve this target? llama.cpp's five vocabulary rules.

Speculative decoding hands the draft's token ids straight to the target, so both must mean the same thing by
every id. llama.cpp decides this in ``common_speculative_are_compatible`` (``common/speculative.cpp``,
constants ``SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128`` and ``SPEC_VOCAB_CHECK_START_TOKEN_ID = 5``); the rules,
checked in this order, are:

1. ``vocab type``  -- the same tokenizer algorithm (``llama_vocab_type``: SPM, BPE, WPM, UGM, ...);
2. ``BOS``         -- the same add-BOS flag, and the same BOS id if BOS is added;
3. ``EOS``         -- the same add-EOS flag, and the same EOS id if EOS is added;
4. ``vocab size``  -- token counts differ by at most 128;
5. ``token text``  -- identical token text for every id from 5 up to the smaller vocabulary size.

The check is a pure function over :class:`VocabSummary`, which has two constructors: from a loaded model's
vocabulary (``llama_cpp.llama_vocab_*``; authoritative, used before speculating) and from GGUF metadata
(:func:`VocabSummary.from_gguf`; used by ``specchat models list`` without loading llama.cpp, and mirroring
how llama.cpp's ``llama_vocab::impl::load`` fills in defaults when a key is missing).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specchat.errors import IncompatibleDraftError

MAX_VOCAB_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE
CHECK_START_TOKEN_ID = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID
TOKEN_NULL = -1  # LLAMA_TOKEN_NULL

RULE_VOCAB_TYPE = "vocab type"
RULE_BOS = "BOS"
RULE_EOS = "EOS"
RULE_VOCAB_SIZE = "vocab size"
RULE_TOKEN_TEXT = "token text"
RULES = (RULE_VOCAB_TYPE, RULE_BOS, RULE_EOS, RULE_VOCAB_SIZE, RULE_TOKEN_TEXT)

# enum llama_vocab_type (include/llama.h)
VOCAB_NONE, VOCAB_SPM, VOCAB_BPE, VOCAB_WPM, VOCAB_UGM, VOCAB_RWKV, VOCAB_PLAMO2 = range(7)
VOCAB_TYPE_NAMES = {
    VOCAB_NONE: "none",
    VOCAB_SPM: "SPM",
    VOCAB_BPE: "BPE",
    VOCAB_WPM: "WPM",
    VOCAB_UGM: "UGM",
    VOCAB_RWKV: "RWKV",
    VOCAB_PLAMO2: "PLaMo-2",
}
# tokenizer.ggml.model -> vocab type (llama_vocab::impl::load)
TOKENIZER_MODEL_TYPES = {
    "no_vocab": VOCAB_NONE,
    "none": VOCAB_NONE,
    "llama": VOCAB_SPM,
    "bert": VOCAB_WPM,
    "gpt2": VOCAB_BPE,
    "hybriddna": VOCAB_BPE,
    "whitespace": VOCAB_BPE,
    "t5": VOCAB_UGM,
    "rwkv": VOCAB_RWKV,
    "plamo2": VOCAB_PLAMO2,
}
# default (bos, eos) ids per vocab type when the GGUF has no tokenizer.ggml.{bos,eos}_token_id
_DEFAULT_SPECIAL_IDS = {
    VOCAB_NONE: (TOKEN_NULL, TOKEN_NULL),
    VOCAB_SPM: (1, 2),
    VOCAB_WPM: (101, TOKEN_NULL),
    VOCAB_BPE: (11, 11),
    VOCAB_UGM: (TOKEN_NULL, 1),
    VOCAB_RWKV: (TOKEN_NULL, TOKEN_NULL),
    VOCAB_PLAMO2: (1, 2),
}
# default (add_bos, add_eos) per vocab type when the GGUF has no tokenizer.ggml.add_{bos,eos}_token
_DEFAULT_ADD = {
    VOCAB_SPM: (True, False),
    VOCAB_WPM: (True, False),
    VOCAB_UGM: (False, True),
    VOCAB_RWKV: (False, False),
}
# BPE pre-tokenizers for which llama.cpp turns add_bos on (or drops the BOS id) before reading the flags
_BPE_PRE_ADD_BOS = {
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano",
    "tekken", "chameleon",
}
_BPE_PRE_NO_BOS = {"chatglm-bpe", "glm4", "glm5"}


@dataclass(frozen=True)
class VocabSummary:
    """What the five rules look at, from either a loaded model or a GGUF's metadata.

    ``texts[i]`` is token ``i``'s text as stored in the vocabulary (bytes, e.g. ``b"\\xc4\\xa0the"``).
    ``source`` names where it came from (a path), for messages.
    """

    vocab_type: int
    add_bos: bool
    bos: int
    add_eos: bool
    eos: int
    n_tokens: int
    texts: Sequence[bytes]
    source: str = ""

    @property
    def vocab_type_name(self) -> str:
        return VOCAB_TYPE_NAMES.get(self.vocab_type, f"type {self.vocab_type}")

    @classmethod
    def from_llama_vocab(cls, vocab: Any, source: str = "") -> VocabSummary:
        """From a ``llama_vocab *`` (``llama_cpp.llama_model_get_vocab(model)``) of a loaded model."""
        import llama_cpp

        n = int(llama_cpp.llama_vocab_n_tokens(vocab))
        get_text = llama_cpp.llama_vocab_get_text
        return cls(
            vocab_type=int(llama_cpp.llama_vocab_type(vocab)),
            add_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            bos=int(llama_cpp.llama_vocab_bos(vocab)),
            add_eos=bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            eos=int(llama_cpp.llama_vocab_eos(vocab)),
            n_tokens=n,
            texts=tuple((get_text(vocab, i) or b"") for i in range(n)),
            source=source,
        )

    @classmethod
    def from_llama_model(cls, model: Any, source: str = "") -> VocabSummary:
        """From a ``llama_model *`` or a ``llama_cpp.Llama`` instance."""
        import llama_cpp

        if isinstance(model, llama_cpp.Llama):
            # never rebind ``model`` here: in CPython 3.11 a temporary argument's only reference moves into
            # this frame, so dropping it would free the model while its vocab pointer is being read
            return cls.from_llama_vocab(llama_cpp.llama_model_get_vocab(model.model), source or str(model.model_path))
        return cls.from_llama_vocab(llama_cpp.llama_model_get_vocab(model), source=source)

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], source: str = "") -> VocabSummary:
        """From GGUF metadata (``tokenizer.ggml.*``), filling defaults the way llama.cpp's vocab loader does.

        A GGUF without ``tokenizer.ggml.model`` has no usable vocabulary for llama.cpp; it is summarised
        as vocab type "none" with no tokens.
        """
        model_name = metadata.get("tokenizer.ggml.model")
        pre = metadata.get("tokenizer.ggml.pre") or "default"
        raw_tokens = metadata.get("tokenizer.ggml.tokens")
        tokens = raw_tokens if isinstance(raw_tokens, list) else []
        if not isinstance(model_name, str):
            vtype = VOCAB_NONE
        else:
            vtype = TOKENIZER_MODEL_TYPES.get(model_name, -1)
        if vtype == VOCAB_NONE:
            tokens = []
        n = len(tokens)
        bos, eos = _DEFAULT_SPECIAL_IDS.get(vtype, (TOKEN_NULL, TOKEN_NULL))
        add_bos, add_eos = _DEFAULT_ADD.get(vtype, (False, False))
        if vtype == VOCAB_BPE:
            if pre in _BPE_PRE_ADD_BOS:
                add_bos = True
            if pre in _BPE_PRE_NO_BOS:
                bos = TOKEN_NULL
        # a default id outside the vocabulary is disabled; a given id outside it is ignored (default kept)
        bos = bos if 0 <= bos < n else TOKEN_NULL
        eos = eos if 0 <= eos < n else TOKEN_NULL
        given_bos = metadata.get("tokenizer.ggml.bos_token_id")
        given_eos = metadata.get("tokenizer.ggml.eos_token_id")
        if isinstance(given_bos, int) and 0 <= given_bos < n:
            bos = given_bos
        if isinstance(given_eos, int) and 0 <= given_eos < n:
            eos = given_eos
        if isinstance(metadata.get("tokenizer.ggml.add_bos_token"), bool):
            add_bos = metadata["tokenizer.ggml.add_bos_token"]
        if isinstance(metadata.get("tokenizer.ggml.add_eos_token"), bool):
            add_eos = metadata["tokenizer.ggml.add_eos_token"]
        return cls(
            vocab_type=vtype,
            add_bos=bool(add_bos),
            bos=int(bos),
            add_eos=bool(add_eos),
            eos=int(eos),
            n_tokens=n,
            texts=tuple(t.encode("utf-8", errors="surrogateescape") for t in tokens),
            source=source,
        )

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str]) -> VocabSummary:
        """Parse (and validate) a GGUF file's header and summarise its vocabulary; no llama.cpp involved."""
        from specchat.engine.gguf import parse_gguf

        parsed = parse_gguf(path)
        return cls.from_metadata(parsed.metadata, source=str(Path(path)))


@dataclass(frozen=True)
class CompatResult:
    """``ok``; else the failed ``rule`` (one of :data:`RULES`) and a one-line ``message``."""

    ok: bool
    rule: str | None = None
    message: str = ""

    def __bool__(self) -> bool:
        return self.ok


def _show_text(text: bytes) -> str:
    shown = text.decode("utf-8", errors="backslashreplace")
    return repr(shown if len(shown) <= 40 else shown[:40] + "…")


def _id(token: int) -> str:
    return "none" if token < 0 else str(token)




def check_compatible(target: VocabSummary, draft: VocabSummary) -> CompatResult:
    """Apply llama.cpp's five rules (module docstring) in order; report the first that fails."""
    where = ""
    if target.source or draft.source:
        where = f" (target {Path(target.source).name or '?'}, draft {Path(draft.source).name or '?'})"
    fix = "pick a draft from the same model family as the target (same tokenizer)"

    def fail(rule: str, detail: str) -> CompatResult:
        return CompatResult(False, rule, f"draft incompatible with target{where}: rule '{rule}' — {detail}; {fix}")

    if target.vocab_type != draft.vocab_type:
        return fail(
            RULE_VOCAB_TYPE,
            f"target uses a {target.vocab_type_name} tokenizer, draft a {draft.vocab_type_name} tokenizer",
        )
    for rule, t_add, t_id, d_add, d_id in (
        (RULE_BOS, target.add_bos, target.bos, draft.add_bos, draft.bos),
        (RULE_EOS, target.add_eos, target.eos, draft.add_eos, draft.eos),
    ):
        if t_add != d_add:
            t_says = "adds" if t_add else "does not add"
            d_says = "does" if d_add else "does not"
            return fail(rule, f"target {t_says} the {rule} token to prompts, the draft {d_says}")
        if t_add and t_id != d_id:
            return fail(rule, f"target's {rule} token id is {_id(t_id)}, draft's {_id(d_id)}")
    diff = abs(target.n_tokens - draft.n_tokens)
    if diff > MAX_VOCAB_SIZE_DIFFERENCE:
        return fail(
            RULE_VOCAB_SIZE,
            f"target has {target.n_tokens} tokens, draft {draft.n_tokens} "
            f"(max difference {MAX_VOCAB_SIZE_DIFFERENCE})",
        )
    t_texts, d_texts = target.texts, draft.texts
    for i in range(CHECK_START_TOKEN_ID, min(target.n_tokens, draft.n_tokens)):
        if t_texts[i] != d_texts[i]:
            return fail(
                RULE_TOKEN_TEXT,
                f"token {i} is {_show_text(t_texts[i])} in the target but {_show_text(d_texts[i])} in the draft",
            )
    return CompatResult(True)


def require_compatible(target: VocabSummary, draft: VocabSummary) -> None:
    """Raise :class:`IncompatibleDraftError` (naming the rule and both values) unless the pair is compatible."""
    result = check_compatible(target, draft)
    if not result.ok:
        raise IncompatibleDraftError(result.message)


def check_gguf_pair(target: str | os.PathLike[str], draft: str | os.PathLike[str]) -> CompatResult:
    """The five rules on two GGUF files' metadata (no llama.cpp), e.g. for ``specchat models list``."""
    return check_compatible(VocabSummary.from_gguf(target), VocabSummary.from_gguf(draft))
