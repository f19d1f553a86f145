"""llama.cpp's five draft-compatibility rules on real GGUF files, checked two ways:
from GGUF metadata (no llama.cpp) and from the vocabulary of the model loaded by llama.cpp."""

from __future__ import annotations

import functools
from pathlib import Path

import llama_cpp
import pytest

from specchat.engine.compat import (
    RULE_BOS,
    RULE_EOS,
    RULE_TOKEN_TEXT,
    RULE_VOCAB_SIZE,
    RULE_VOCAB_TYPE,
    CompatResult,
    VocabSummary,
    check_compatible,
    check_gguf_pair,
    require_compatible,
)
from specchat.errors import IncompatibleDraftError, UserError

# vocabulary-only variants: one thin layer is enough, the vocabulary is what matters
SMALL = dict(n_layer=1, n_embd=32, n_head=2, n_ff=32)

ADD_BOS = {"tokenizer.ggml.add_bos_token": True}
ADD_EOS = {"tokenizer.ggml.add_eos_token": True}


@functools.lru_cache(maxsize=None)
def _loaded(path: Path) -> VocabSummary:
    """The vocabulary as llama.cpp loads it (vocab_only: no weights)."""
    return VocabSummary.from_llama_model(llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False))


def _both_ways(target: Path, draft: Path) -> tuple[CompatResult, CompatResult]:
    """(verdict from GGUF metadata, verdict from llama.cpp's loaded vocabularies); they must agree."""
    from_meta = check_gguf_pair(target, draft)
    from_llama = check_compatible(_loaded(target), _loaded(draft))
    assert (from_meta.ok, from_meta.rule) == (from_llama.ok, from_llama.rule)
    assert from_meta.message == from_llama.message
    return from_meta, from_llama


@pytest.fixture(scope="module")
def base(make_tiny_gguf) -> Path:
    return make_tiny_gguf(seed=5, **SMALL)


def test_metadata_summary_matches_llama_cpp(base, bundled_model):
    for path in (base, bundled_model):
        meta, loaded = VocabSummary.from_gguf(path), _loaded(path)
        assert meta == loaded
        assert (meta.vocab_type, meta.add_bos, meta.bos, meta.add_eos, meta.eos, meta.n_tokens) == (
            llama_cpp.LLAMA_VOCAB_TYPE_BPE, False, 1, False, 2, 49152)


def test_compatible_pairs_pass(tiny_pair, tiny_draft_far, bundled_model):
    target, draft = tiny_pair
    for a, b in ((target, draft), (target, tiny_draft_far), (bundled_model, target), (target, bundled_model)):
        meta, loaded = _both_ways(a, b)
        assert meta.ok and loaded.ok and meta.rule is None and bool(meta)
    require_compatible(_loaded(bundled_model), _loaded(draft))  # does not raise


@pytest.mark.parametrize(
    ("variant", "rule", "values"),
    [
        (dict(metadata_overrides={"tokenizer.ggml.model": "llama"}), RULE_VOCAB_TYPE, ("BPE", "SPM")),
        (dict(metadata_overrides=ADD_BOS), RULE_BOS, ("does not add", "draft does")),
        (dict(metadata_overrides=ADD_EOS), RULE_EOS, ("does not add", "draft does")),
        (dict(n_vocab_pad=129), RULE_VOCAB_SIZE, ("49152", "49281", "128")),
        (dict(n_vocab_pad=-200), RULE_VOCAB_SIZE, ("49152", "48952", "128")),
        (dict(token_overrides={1000: "<specchat-changed>"}), RULE_TOKEN_TEXT, ("1000", "'()'", "<specchat-changed>")),
        (dict(token_overrides={5: "<file-sep-changed>"}), RULE_TOKEN_TEXT, ("token 5 ", "<file_sep>")),
        (dict(token_overrides={49151: "<last-changed>"}), RULE_TOKEN_TEXT, ("49151", "ectable", "<last-changed>")),
    ],
)
def test_each_rule_fails_the_pair_and_names_the_rule_and_values(make_tiny_gguf, base, variant, rule, values):
    draft = make_tiny_gguf(seed=5, **SMALL, **variant)
    meta, loaded = _both_ways(base, draft)
    assert not meta.ok and meta.rule == rule
    assert f"rule '{rule}'" in meta.message and all(v in meta.message for v in values), meta.message
    assert "\n" not in meta.message and draft.name in meta.message and base.name in meta.message
    with pytest.raises(IncompatibleDraftError, match=f"rule '{rule}'") as err:
        require_compatible(_loaded(base), _loaded(draft))
    assert isinstance(err.value, UserError)


@pytest.mark.parametrize(
    ("target_kw", "draft_kw", "rule", "values"),
    [
        # both add BOS, but with different ids
        (dict(metadata_overrides=ADD_BOS), dict(metadata_overrides={**ADD_BOS, "tokenizer.ggml.bos_token_id": 0}),
         RULE_BOS, ("BOS token id is 1", "draft's 0")),
        (dict(metadata_overrides=ADD_EOS), dict(metadata_overrides={**ADD_EOS, "tokenizer.ggml.eos_token_id": 0}),
         RULE_EOS, ("EOS token id is 2", "draft's 0")),
    ],
)
def test_special_token_ids_must_match_when_added(make_tiny_gguf, target_kw, draft_kw, rule, values):
    target = make_tiny_gguf(seed=5, **SMALL, **target_kw)
    draft = make_tiny_gguf(seed=5, **SMALL, **draft_kw)
    meta, _ = _both_ways(target, draft)
    assert meta.rule == rule and all(v in meta.message for v in values), meta.message
    # the same target with itself is fine
    assert _both_ways(target, target)[0].ok


@pytest.mark.parametrize(
    "draft_kw",
    [
        dict(metadata_overrides={"tokenizer.ggml.bos_token_id": 0}),  # BOS id differs but BOS is never added
        dict(metadata_overrides={"tokenizer.ggml.eos_token_id": 0}),  # EOS id differs but EOS is never added
        dict(n_vocab_pad=128),  # exactly the allowed difference
        dict(n_vocab_pad=-128),
        dict(token_overrides={0: "<x0>", 3: "<x3>", 4: "<x4>"}),  # ids below 5 are not compared
        dict(seed=9, n_layer=2, n_embd=64, n_head=4, n_ff=64),  # different weights and shapes, same vocab
    ],
)
def test_differences_the_rules_allow(make_tiny_gguf, base, draft_kw):
    draft = make_tiny_gguf(**{"seed": 5, **SMALL, **draft_kw})
    meta, loaded = _both_ways(base, draft)
    assert meta.ok and loaded.ok, meta.message


def test_padded_vocab_model_still_runs(make_tiny_gguf):
    """The vocab-size variants are complete models, not just vocabularies."""
    path = make_tiny_gguf(seed=5, **SMALL, n_vocab_pad=129)
    model = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=1, n_threads_batch=1, verbose=False)
    assert model.n_vocab() == 49152 + 129
    model.eval(model.tokenize(b"Hello", add_bos=False))
    assert len(model.scores[0]) == 49152 + 129


def test_metadata_defaults_follow_llama_cpp(make_tiny_gguf, base):
    """Keys missing from the GGUF take llama.cpp's per-tokenizer defaults (e.g. BPE's BOS/EOS id 11)."""
    dropped = {"tokenizer.ggml.bos_token_id": None, "tokenizer.ggml.eos_token_id": None,
               "tokenizer.ggml.add_bos_token": None}
    path = make_tiny_gguf(seed=5, **SMALL, metadata_overrides=dropped)
    meta, loaded = VocabSummary.from_gguf(path), _loaded(path)
    assert meta == loaded
    assert (meta.bos, meta.eos, meta.add_bos) == (11, 11, False)
    spm = make_tiny_gguf(seed=5, **SMALL, metadata_overrides={"tokenizer.ggml.model": "llama",
                                                              "tokenizer.ggml.add_bos_token": None})
    meta, loaded = VocabSummary.from_gguf(spm), _loaded(spm)
    assert meta == loaded and meta.add_bos is True  # SPM adds BOS unless told otherwise
