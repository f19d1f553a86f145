"""A suffix index over token-id documents: the longest earlier match of a context's suffix, and the most frequent
continuation after it (SuffixDecoding, Oliaro et al. 2024, arXiv:2411.04975; ArcticInference's
``SuffixDecodingCache``).

**Structure** (chosen by measurement, ``scripts/suffix_index_figures.py``): the documents are concatenated into one
``int32`` array with a separator (:data:`SEP`) before each, and for each order n in :attr:`SuffixIndex.orders`
every n-gram that is followed by a token is hashed (a 64-bit polynomial hash, its top 32 bits kept) and the
positions of the following tokens are sorted by that key (one ``numpy.sort`` of key << 32 | position, so equal keys
stay oldest first). A lookup hashes the context's last n tokens, finds the key's range with ``numpy.searchsorted``, then
extends every candidate's match backwards against the context in one vectorised comparison (which also throws out
hash collisions: a candidate must really match n tokens). The alternative measured: a suffix automaton (Blumer et
al. 1985) in pure Python, dicts per state, over 102,144 tokens of the same synthetic corpus took 9.7 µs of CPU per
token and held 405 bytes per token (under ``tracemalloc``): ~2 GB and tens of seconds for 5 M tokens, and it is not
saved to disk cheaply. A suffix tree (SuffixDecoding's, in C++ there) is of the same kind in Python; a true suffix
array by prefix doubling needs ~5 full sorts. The sorted n-gram index needs one sort per order and answers in a few
``searchsorted`` calls. Measured with the script on the AMD EPYC here (one core of two, shared, the script
under ``nice -n 10`` at load average 5-6.6, so wall times include long waits for the core), 10,000 synthetic
messages, 5.0 M tokens: a build takes 2.0 s of CPU (15.6 s wall at that load; 6-6.5 s wall before order 12 was
hashed from 4 and 8), a save 0.2-0.5 s, a load 0.12 s of CPU (0.25-0.5 s wall); 20.3 bytes per indexed token (the
corpus 4.5 with its room to grow, keys and positions 8 per order); adding a 500-token reply 0.6-1.0 ms median
(3.3-3.7 ms mean with the waits); a lookup 0.05-0.09 ms median, 0.32-0.47 ms p95.

**Incremental:** documents added after the last sort go to a small dict (key -> positions) beside the sorted
arrays (a 500-token reply costs ~1000 dict updates); a removed document's tokens are overwritten with
:data:`SEP`, so no match can touch it, and :meth:`SuffixIndex.compact` (run by :meth:`save`) drops them and
re-sorts everything.

**Candidates** (SuffixDecoding's speculation): among the occurrences whose match with the context is the longest
(the suffix tree's deepest matched node, over the ``max_candidates`` most recent occurrences of the n-gram), follow
the greedy path of most frequent next tokens; each token's probability is the product of the frequency ratios
along the path (child count / parent count), the path stops where that falls below ``min_token_prob`` or after
``max_spec_factor`` × match length + ``max_spec_offset`` tokens (ArcticInference's defaults 1.0, 0.0, 0.1) or at
a document's end: documents are kept apart, so a draft never runs from one saved message into the next.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import os
import threading
import zlib
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: the separator written before every document and over removed ones (no token id is negative)
SEP = -1
#: the persisted file's format; another value is a stale file, rebuilt
FORMAT_VERSION = 1
_MULT = 0x9E3779B97F4A7C15  # the hash's multiplier (golden-ratio constant: odd, well mixed)
_MASK = (1 << 64) - 1
#: the longest continuation one lookup returns (the buffer always keeps this much room past the corpus)
MAX_DRAFT = 1024
#: the default n-gram orders looked up (longest first): 12 finds the long copies without wading through the
#: hundreds of occurrences a common 4-gram has, 4 the short ones
ORDERS = (12, 4)
#: the most tokens of chat template between a message's end and its reply (:meth:`SuffixIndex.reply_after`): ChatML's
#: ``\n<|im_start|>assistant\n`` is 4-5 tokens, Llama 3's ``<|start_header_id|>assistant<|end_header_id|>\n\n`` 4
MAX_HEADER = 8
#: the most saved answers to one message :meth:`SuffixIndex.reply_after` follows (the newest): a question asked a
#: hundred times must not cost a hundred comparisons a round
MAX_ANSWERS = 16


class CorruptIndexError(ValueError):
    """A persisted index that cannot be read or does not fit this index's settings (rebuild it)."""


@dataclass(slots=True)
class Candidate:
    """A proposed continuation: its tokens, the probability of each (cumulative, by frequency), the match
    length it followed, how many occurrences matched that long, and where the newest one is in the corpus
    (:meth:`SuffixIndex.doc_at` names its document)."""

    tokens: list[int]
    probs: list[float]
    match_len: int
    occurrences: int
    position: int = -1


@dataclass(frozen=True, slots=True)
class Rename:
    """Text of a corpus occurrence (``old``) that the context says otherwise (``new``) with the same words around
    it: ``anchor`` agreeing tokens before, the resumed match after (:meth:`SuffixIndex.renames`); ``position``: where
    ``old`` is in the corpus."""

    old: tuple[int, ...]
    new: tuple[int, ...]
    anchor: int
    position: int = -1


_HIGH = np.uint64(0xFFFFFFFF00000000)
_LOW = np.uint64(0xFFFFFFFF)


def _hash64(tokens: np.ndarray, n: int, cache: dict[int, np.ndarray]) -> np.ndarray:
    """64-bit polynomial hashes sum((t_j + 1) * M^(n-1-j)) of every window ``tokens[i:i + n]`` (i = 0 ..
    len - n); a key is the top 32 bits. A window of 4 + b tokens is h_4 * M^b + h_b, so with ``cache`` (n -> hashes)
    order 12 is built from 4 and 8, 8 from 4 and 4: five array passes for orders 4 and 12 instead of sixteen
    (measured over 2 M tokens: 0.8 s -> 0.3 s)."""
    got = cache.get(n)
    if got is not None:
        return got
    m = len(tokens) - n + 1
    mult = np.uint64(_MULT)
    with np.errstate(over="ignore"):
        if n <= 4:
            t = tokens.astype(np.uint64)
            t += np.uint64(1)
            h = t[:m] * mult if n > 1 else t[:m].copy()
            for j in range(1, n):
                h += t[j : j + m]
                if j < n - 1:
                    h *= mult
        else:
            head, rest = _hash64(tokens, 4, cache), _hash64(tokens, n - 4, cache)
            h = head[:m] * np.uint64(pow(_MULT, n - 4, 1 << 64))
            h += rest[4 : 4 + m]
    cache[n] = h
    return h


def _packed(tokens: np.ndarray, n: int, seps: np.ndarray, cache: dict[int, np.ndarray]) -> np.ndarray:
    """(key << 32 | p) as uint64 for every position p with an n-gram before it and no :data:`SEP` in either
    (:func:`_valid_positions`): the key and the position in one number, so one ``np.sort`` orders both (equal keys
    by position, oldest first). Measured over 0.5 M entries: 0.09 s against 0.15 s for a stable ``argsort`` of the
    keys and the gather after it."""
    pos = _valid_positions(tokens, n, seps)
    packed = _hash64(tokens, n, cache)[pos - n]
    packed &= _HIGH
    packed |= pos.view(np.uint64)
    return packed


def _hash_query(tokens: Sequence[int]) -> int:
    h = 0
    for tok in tokens:
        h = (h * _MULT + int(tok) + 1) & _MASK
    return h >> 32


def _valid_positions(tokens: np.ndarray, n: int, seps: np.ndarray | None = None) -> np.ndarray:
    """Positions p >= n whose preceding n tokens and p itself hold no :data:`SEP` (an n-gram with a continuation).
    ``seps``: ``tokens``' separator counts (:func:`_sep_counts`), when already computed for another order."""
    sep = _sep_counts(tokens) if seps is None else seps
    pos = np.flatnonzero(sep[n + 1 :] == sep[: len(tokens) - n])
    pos += n
    return pos


def _sep_counts(tokens: np.ndarray) -> np.ndarray:
    """``out[i]``: separators among ``tokens[:i]``."""
    out = np.zeros(len(tokens) + 1, dtype=np.int32)
    np.cumsum(tokens == SEP, out=out[1:])
    return out


@dataclass(slots=True)
class _Order:
    n: int
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))  # sorted
    pos: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # positions, in key order
    delta: dict[int, list[int]] = field(default_factory=dict)  # key -> positions added since the sort


@functools.cache
def _gap_tables(max_gap: int, anchor: int) -> tuple[tuple[tuple[int, int], ...], np.ndarray, np.ndarray, np.ndarray]:
    """The (gx, gy) gap lengths :meth:`SuffixIndex.renames` tries, in its order (the shorter total first, then the
    shorter gap in the context), and where each one's tokens are in the windows of ``max_gap + anchor`` tokens before
    the corpus position (rows) and the context position (columns): the anchor's pairs, and the corpus gap's tokens
    (padded with its last one, so a row has the same length)."""
    w = max_gap + anchor
    combos = tuple((gx, total - gx) for total in range(2, 2 * max_gap + 1)
                   for gx in range(max(1, total - max_gap), min(max_gap, total - 1) + 1))
    rows = np.array([[w - gy - anchor + t for t in range(anchor)] for _gx, gy in combos])
    cols = np.array([[w - gx - anchor + t for t in range(anchor)] for gx, _gy in combos])
    gaps = np.array([[w - gy + min(t, gy - 1) for t in range(max_gap)] for _gx, gy in combos])
    return combos, rows, cols, gaps


class SuffixIndex:
    """Documents of token ids (each under a key; ``key[0]`` may group them, e.g. by conversation), and
    :meth:`lookup`. Thread-safe (one lock)."""

    def __init__(self, *, orders: Sequence[int] = ORDERS, max_match: int = 64, max_candidates: int = 256) -> None:
        if not orders or any(n < 1 for n in orders):
            raise ValueError(f"orders must be positive n-gram sizes, got {tuple(orders)}")
        self.orders = tuple(sorted(set(int(n) for n in orders), reverse=True))
        self.max_match = max(max_match, self.orders[0])
        self.max_candidates = max(1, max_candidates)
        self._lock = threading.RLock()
        self._clear()

    def _clear(self) -> None:
        self._buf = np.full(MAX_DRAFT, SEP, dtype=np.int32)  # the corpus; always SEP past ``_n``
        self._n = 0
        self._sorted_n = 0  # positions below this are in the sorted arrays
        self._ord = {n: _Order(n) for n in self.orders}
        #: key -> (start, end, checksum) of the document's tokens in the corpus
        self._docs: dict[Hashable, tuple[int, int, int]] = {}
        self._dead = 0  # tokens of removed documents still in the corpus
        #: the documents' start positions in increasing order and their keys, for :meth:`doc_at`'s bisection;
        #: an add appends (starts only grow), a removed document's entry stays until the next compact
        self._starts: list[int] = []
        self._start_keys: list[Hashable] = []

    def _index_starts(self) -> None:
        """Rebuild :attr:`_starts` from the document table (after a build, a compact or a load)."""
        order = sorted(self._docs.items(), key=lambda kv: kv[1][0])
        self._starts = [doc[0] for _k, doc in order]
        self._start_keys = [k for k, _doc in order]

    # -- size -----------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Documents indexed."""
        return len(self._docs)

    @property
    def n_tokens(self) -> int:
        """Tokens of the live documents."""
        return self._n - len(self._docs) - self._dead

    def nbytes(self) -> int:
        """Bytes held by the arrays (the corpus and each order's keys and positions; the small add dict
        estimated at 100 bytes per entry)."""
        with self._lock:
            total = self._buf.nbytes
            for o in self._ord.values():
                total += o.keys.nbytes + o.pos.nbytes + 100 * sum(len(v) for v in o.delta.values())
            return total

    def __contains__(self, key: Hashable) -> bool:
        return key in self._docs

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._docs)

    def checksum(self, key: Hashable) -> int | None:
        doc = self._docs.get(key)
        return None if doc is None else doc[2]

    # -- building -------------------------------------------------------------------------------------
    @classmethod
    def build(cls, docs: Iterable[tuple[Hashable, Sequence[int], int]], **kw: int | Sequence[int]) -> SuffixIndex:
        """An index of ``docs`` ((key, tokens, checksum) each), sorted in one pass per order."""
        index = cls(**kw)  # type: ignore[arg-type]
        parts: list[np.ndarray] = []
        at = 0
        for key, tokens, check in docs:
            arr = np.asarray(tokens, dtype=np.int32)
            parts.append(np.array([SEP], dtype=np.int32))
            parts.append(arr)
            index._docs[key] = (at + 1, at + 1 + len(arr), int(check))
            at += 1 + len(arr)
        corpus = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        index._set_corpus(corpus)
        index._index_starts()
        return index

    def _set_corpus(self, corpus: np.ndarray) -> None:
        """Take ``corpus`` as the whole text and sort every order over it."""
        n = len(corpus)
        buf = np.full(n + n // 8 + 65536, SEP, dtype=np.int32)  # room for the replies of a session without a copy
        buf[:n] = corpus
        self._buf, self._n, self._sorted_n = buf, n, n
        seps = _sep_counts(corpus)
        hashes: dict[int, np.ndarray] = {}
        for o in sorted(self._ord.values(), key=lambda o: o.n):
            if n <= o.n:
                o.keys, o.pos, o.delta = np.zeros(0, np.uint32), np.zeros(0, np.int32), {}
                continue
            packed = _packed(corpus, o.n, seps, hashes)
            packed.sort()
            o.keys = (packed >> np.uint64(32)).astype(np.uint32)
            packed &= _LOW
            o.pos = packed.astype(np.int32)
            o.delta = {}

    def add(self, key: Hashable, tokens: Sequence[int], checksum: int = 0) -> None:
        """Append a document (replacing one under the same key): O(len(tokens)) dict updates, no re-sort."""
        arr = np.asarray(tokens, dtype=np.int32)
        if arr.size and int(arr.min()) < 0:
            raise ValueError("token ids must be non-negative")
        with self._lock:
            if key in self._docs:
                self.remove(key)
            start = self._n + 1
            need = start + len(arr) + MAX_DRAFT
            if need > len(self._buf):
                grown = np.full(max(need, 2 * len(self._buf)), SEP, dtype=np.int32)
                grown[: self._n] = self._buf[: self._n]
                self._buf = grown
            self._buf[start : start + len(arr)] = arr
            self._n = start + len(arr)
            self._docs[key] = (start, self._n, int(checksum))
            self._starts.append(start)
            self._start_keys.append(key)
            lo = start - 1  # the separator: windows start at the document's first token
            piece = self._buf[lo : self._n]
            hashes: dict[int, np.ndarray] = {}
            seps = _sep_counts(piece)
            for o in sorted(self._ord.values(), key=lambda o: o.n):
                if len(piece) <= o.n:
                    continue
                packed = _packed(piece, o.n, seps, hashes)
                delta = o.delta
                for k, p in zip((packed >> np.uint64(32)).tolist(), ((packed & _LOW) + np.uint64(lo)).tolist()):
                    bucket = delta.get(k)
                    if bucket is None:
                        delta[k] = [p]
                    else:
                        bucket.append(p)

    def remove(self, key: Hashable) -> bool:
        """Drop a document: its tokens become :data:`SEP` (no match can reach them). False if it was not there."""
        with self._lock:
            doc = self._docs.pop(key, None)
            if doc is None:
                return False
            self._buf[doc[0] : doc[1]] = SEP
            self._dead += doc[1] - doc[0] + 1
            return True

    def remove_group(self, group: Hashable) -> int:
        """Drop every document whose key's first element is ``group`` (a conversation); returns how many."""
        with self._lock:
            keys = [k for k in self._docs if isinstance(k, tuple) and k and k[0] == group]
            for k in keys:
                self.remove(k)
            return len(keys)

    def compact(self) -> None:
        """Re-sort everything: the documents added since the last sort join the sorted arrays, removed ones go."""
        with self._lock:
            if self._dead == 0 and self._sorted_n == self._n:
                return  # already one sorted corpus
            docs = sorted(self._docs.items(), key=lambda kv: kv[1][0])
            parts: list[np.ndarray] = []
            at = 0
            new_docs: dict[Hashable, tuple[int, int, int]] = {}
            for key, (s, e, check) in docs:
                parts.append(np.array([SEP], dtype=np.int32))
                parts.append(self._buf[s:e])
                new_docs[key] = (at + 1, at + 1 + e - s, check)
                at += 1 + e - s
            corpus = np.concatenate(parts) if parts else np.zeros(0, np.int32)
            self._docs, self._dead = new_docs, 0
            self._set_corpus(corpus)
            self._index_starts()

    # -- lookup ---------------------------------------------------------------------------------------
    def _candidates(self, o: _Order, key: int) -> np.ndarray:
        k = np.uint32(key)  # a Python int would make searchsorted cast the whole array first (0.5 ms at 0.5 M)
        lo = int(o.keys.searchsorted(k, side="left"))
        hi = int(o.keys.searchsorted(k, side="right"))
        cap = self.max_candidates
        old = o.pos[max(lo, hi - cap) : hi]
        new = o.delta.get(key)
        if new:
            return np.concatenate((old, np.asarray(new[-cap:], dtype=np.int32)))[-cap:]
        return old

    def lookup(
        self,
        context: Sequence[int],
        max_tokens: int,
        *,
        max_spec_factor: float = 1.0,
        max_spec_offset: float = 0.0,
        min_token_prob: float = 0.1,
    ) -> Candidate | None:
        """The frequency-scored continuation of the longest match of ``context``'s suffix, or None."""
        if max_tokens <= 0:
            return None
        tail = list(context[-self.max_match :])
        with self._lock:
            for o in self._ord.values():
                if len(tail) < o.n:
                    continue
                cand = self._candidates(o, _hash_query(tail[-o.n :]))
                if cand.size == 0:
                    continue
                mlen = self._match_lengths(cand - 1, tail)
                best = int(mlen.max())
                if best < o.n:  # only hash collisions, or occurrences in removed documents
                    continue
                occ = cand[mlen == best]
                limit = min(max_tokens, MAX_DRAFT, int(math.floor(max_spec_factor * best + max_spec_offset)))
                return self._walk(occ, best, limit, min_token_prob)
        return None

    def reply_after(
        self,
        message: Sequence[int],
        after: Sequence[int],
        max_tokens: int,
        *,
        end: int | None = None,
        max_header: int = MAX_HEADER,
        max_spec_factor: float = 1.0,
        max_spec_offset: float = 0.0,
        min_token_prob: float = 0.1,
    ) -> Candidate | None:
        """The saved reply to the same message, where this reply has so far gone on as it did; None otherwise.

        ``message``: the context up to the end of the user's message; ``end``: the end-of-turn token the context
        closes it with, which a saved document may end with too or not (the app's corpus saves a message's text
        alone); ``after``: the context after that token - the chat template's header for the reply, then the reply
        so far. A saved document whose whole text (or the last :attr:`max_match` tokens of a longer message) is the
        message's end, followed by the next document of its group (the same conversation) - the saved reply - whose
        first r tokens are ``after``'s last r (r >= 1, the header at most ``max_header`` tokens), is an occurrence;
        the continuation is that reply's text after them, frequency-scored over every occurrence (:meth:`_walk`),
        and the match length is the message's match plus r.

        Why: :meth:`lookup` matches within one document, and the template's header between a message and its reply
        is in no saved document, so the same question asked again matched only the reply so far - 1, 2, 3 ...
        tokens at the reply's start - and its drafts ramped up over the first ~50 tokens of a reply saved whole.
        The documents must lie one after the other in the corpus, as a conversation's messages are added (the history
        corpus adds a conversation again whole when one of its messages changes, a reply regenerated:
        :mod:`specchat.history.corpus`); a reply added elsewhere is found only by :meth:`lookup`."""
        if max_tokens <= 0 or not after:
            return None
        n = self.orders[-1]
        tail = list(message[-self.max_match :])
        if len(tail) < n + 1:
            return None
        with self._lock:
            buf, o = self._buf, self._ord[n]
            cand = self._candidates(o, _hash_query(tail[-n - 1 : -1]))  # positions of a message's last token
            if cand.size == 0:
                return None
            cand = cand[buf[cand] == tail[-1]]
            ends = buf[cand + 1] == SEP  # ... that ends its document, or is followed by its end token that does
            closed = (buf[cand + 1] == end) & (buf[cand + 2] == SEP) if end is not None else np.zeros_like(ends)
            gap = np.where(ends, 2, 3)[ends | closed]  # from the message's last token to the next document's start
            cand = cand[ends | closed]
            if cand.size == 0:
                return None
            m = len(tail)
            mlen = self._match_lengths(cand, tail)
            whole = (mlen == m) | (buf[np.maximum(cand - mlen, 0)] == SEP)  # the saved message matched from its start
            whole &= mlen > n
            keep = np.flatnonzero(whole)[-MAX_ANSWERS:]  # the newest: each costs a few bisections and a comparison
            found: list[tuple[int, int]] = []  # (continuation position, match length), oldest first
            for p, ml, g in zip(cand[keep].tolist(), mlen[keep].tolist(), gap[keep].tolist()):
                start = p + g
                key = self.doc_at(start)
                doc = self._docs.get(key)  # type: ignore[arg-type]
                if doc is None or doc[0] != start or not self._same_group(self.doc_at(p), key):
                    continue
                first = int(buf[start])
                for skip in range(min(max_header, len(after) - 1) + 1):
                    r = len(after) - skip
                    if (after[skip] == first and start + r <= doc[1]
                            and buf[start : start + r].tolist() == list(after[skip:])):
                        found.append((start + r, ml + r))
                        break
            if not found:
                return None
            occ = np.asarray([c for c, _ml in found], dtype=np.int64)
            match_len = min(ml for _c, ml in found)
            limit = min(max_tokens, MAX_DRAFT, int(math.floor(max_spec_factor * match_len + max_spec_offset)))
            return self._walk(occ, match_len, limit, min_token_prob)

    def _match_lengths(self, ends: np.ndarray, tail: list[int]) -> np.ndarray:
        """For each corpus position in ``ends``, how many of ``tail``'s last tokens the corpus holds ending there
        (one vectorised comparison; before the corpus's start nothing matches)."""
        m = len(tail)
        back = ends[:, None] - np.arange(m)[None, :]  # corpus positions to compare, newest first
        eq = self._buf[np.maximum(back, 0)] == np.asarray(tail[::-1], dtype=np.int32)[None, :]
        eq &= back >= 0
        return np.where(eq.all(axis=1), m, np.argmin(eq, axis=1))

    @staticmethod
    def _same_group(a: Hashable | None, b: Hashable | None) -> bool:
        """Whether two documents' keys are of one group (``key[0]``, a conversation); keys that are not tuples
        are of one group."""
        if a is None or b is None:
            return False
        if isinstance(a, tuple) and isinstance(b, tuple) and a and b:
            return bool(a[0] == b[0])
        return True

    def renames(self, tokens: Sequence[int], start: int, *, max_gap: int = 4, anchor: int = 3,
                max_anchor: int = 16) -> list[Rename]:
        """What ``tokens`` says otherwise than the corpus: at every position q >= ``start`` where a match of
        ``tokens[:q]``'s last n tokens (n the shortest order) resumes - the token before it differs - the earlier
        text ``old`` (1..``max_gap`` tokens) of that corpus occurrence that ``tokens`` replaced with ``new``
        (1..``max_gap`` tokens), both preceded by at least ``anchor`` agreeing tokens: a renamed field, a changed
        word. The shortest gaps win per occurrence; one entry per (old, new), the longest anchor (up to
        ``max_anchor``) kept. A position costs one hash, two ``searchsorted``, one vectorised comparison of the
        n-gram's occurrences and one of the tokens before those that resumed (:meth:`_gaps`): 0.03-0.04 ms on an
        AMD EPYC Zen 4, over the bench's history and over 5 M synthetic tokens alike."""
        n = self.orders[-1]
        found: dict[tuple[tuple[int, ...], tuple[int, ...]], Rename] = {}
        # only the window a position's gaps and anchors can reach is copied (the context is the whole conversation)
        lo = max(0, start - n - max_gap - max_anchor - 1)
        toks = list(tokens[lo:])
        with self._lock:
            buf, o = self._buf, self._ord[n]
            for q in range(max(start - lo, n + anchor + 2), len(toks) + 1):
                cand = self._candidates(o, _hash_query(toks[q - n : q]))
                cand = cand[cand > n + 1]
                if cand.size == 0:
                    continue
                gram = np.asarray(toks[q - n : q], dtype=np.int32)
                keep = (buf[cand[:, None] - n + np.arange(n)[None, :]] == gram[None, :]).all(axis=1)
                keep &= buf[cand - n - 1] != toks[q - n - 1]  # the match starts here: it has just resumed
                cand = cand[keep]
                if cand.size:
                    for r in self._gaps(toks, q - n, cand - n, max_gap, anchor, max_anchor):
                        got = found.get((r.old, r.new))
                        if got is None or r.anchor > got.anchor:
                            found[(r.old, r.new)] = r
        return list(found.values())

    def occurs(self, tokens: Sequence[int]) -> bool:
        """Whether the live corpus holds ``tokens`` anywhere (one vectorised scan: milliseconds over millions of
        tokens; the drafter asks once per renamed text)."""
        if not tokens:
            return True
        with self._lock:
            buf = self._buf[: self._n]
            at = np.flatnonzero(buf[: max(0, len(buf) - len(tokens) + 1)] == tokens[0])
            for j, t in enumerate(tokens[1:], 1):
                at = at[buf[at + j] == t]
            return bool(at.size)

    def _gaps(self, tail: list[int], a: int, bs: np.ndarray, max_gap: int, anchor: int,
              max_anchor: int) -> list[Rename]:
        """For each corpus position in ``bs`` (where a match with ``tail[a:]`` starts), the shortest gaps
        (``tail[a - gx:a]`` against the corpus's ``[b - gy:b]``, the shorter total first, then the shorter gx) behind
        which ``anchor`` or more tokens agree again. One comparison of the ``max_gap + anchor`` tokens before each
        position with those before ``a`` answers every (gx, gy) at once (its diagonals); only a position that has
        such gaps walks its anchor further, in Python (a round looks at ~10 positions, few of which have one)."""
        w = max_gap + anchor
        if a <= anchor or bs.size == 0:
            return []
        buf = self._buf
        # the corpus's w tokens before each position; before the corpus, its first token (a separator, which no
        # context token equals, and a match starts n + 2 tokens in at the earliest: an anchor reaching past the start
        # holds that separator)
        before = buf[np.maximum(bs[:, None] + np.arange(-w, 0), 0)]
        mine = np.asarray(tail[max(0, a - w) : a], dtype=np.int32)
        if mine.size < w:  # the context is shorter: pad with a token no corpus position holds
            mine = np.concatenate((np.full(w - mine.size, -2, dtype=np.int32), mine))
        eq = before[:, :, None] == mine[None, None, :]  # eq[c, i, j]: corpus token i before equals context token j
        combos, rows, cols, gaps = _gap_tables(max_gap, anchor)
        ok = eq[:, rows, cols].all(axis=2)  # (positions, combos): the anchor agrees
        ok &= ~(before[:, gaps] == SEP).any(axis=2)  # a gap never spans two documents
        # (old and new never say the same: the match starts at a, so the tokens before a and b, their last, differ)
        out: list[Rename] = []
        for i in np.flatnonzero(ok.any(axis=1)).tolist():
            gx, gy = combos[int(np.argmax(ok[i]))]
            b = int(bs[i])
            ea, eb = a - gx, b - gy
            m = anchor
            while m < max_anchor and ea - m - 1 >= 0 and eb - m - 1 >= 0 and buf[eb - m - 1] == tail[ea - m - 1]:
                m += 1
            out.append(Rename(tuple(buf[eb:b].tolist()), tuple(tail[ea:a]), m, eb))
        return out

    def _walk(self, occ: np.ndarray, match_len: int, limit: int, min_prob: float) -> Candidate:
        """The greedy path of most frequent next tokens after the occurrences ``occ`` (SuffixDecoding's
        frequency-scored speculation), probabilities multiplied along it."""
        out = Candidate([], [], match_len, len(occ), int(occ[-1]))
        if limit <= 0:
            return out
        rows = self._buf[occ[:, None] + np.arange(limit)[None, :]]  # the buffer is SEP past the corpus end
        prob = 1.0
        d = 0
        while d < limit and len(rows):
            agree = (rows[:, d:] == rows[0, d:]).all(axis=0)
            run = int(np.argmin(agree)) if not agree.all() else limit - d
            if run > 0:  # every remaining occurrence goes on the same way: take the whole run
                seg = rows[0, d : d + run].tolist()
                if SEP in seg:
                    seg = seg[: seg.index(SEP)]
                out.tokens.extend(seg)
                out.probs.extend([float(prob)] * len(seg))
                if len(seg) < run:
                    break
                d += run
                continue
            col = rows[:, d]
            vals, counts = np.unique(col, return_counts=True)
            i = int(np.argmax(counts))
            tok = int(vals[i])
            prob *= float(counts[i]) / len(col)
            if tok == SEP or prob < min_prob:
                break
            out.tokens.append(tok)
            out.probs.append(float(prob))
            rows = rows[col == tok]
            d += 1
        return out

    def span(self, key: Hashable) -> tuple[int, int] | None:
        """The corpus positions [start, end) of document ``key`` now; None when it is not indexed."""
        doc = self._docs.get(key)
        return None if doc is None else (doc[0], doc[1])

    def doc_at(self, position: int) -> Hashable | None:
        """The key of the document holding corpus position ``position`` (for naming a draft's source): a
        bisection of the documents' starts, O(log n) (it was a scan of every document, on the first lookup into
        each new source document)."""
        with self._lock:
            i = bisect.bisect_right(self._starts, position) - 1
            if i < 0:
                return None
            key = self._start_keys[i]
            doc = self._docs.get(key)
            if doc is None or doc[0] != self._starts[i] or not doc[0] <= position < doc[1]:
                return None  # a removed (or since replaced) document, or a separator
            return key

    # -- persistence ----------------------------------------------------------------------------------
    def save(self, path: str | Path, meta: dict[str, object] | None = None) -> None:
        """Compact, then write the index to ``path`` atomically (a temporary file renamed over it)."""
        path = Path(path)
        with self._lock:
            self.compact()
            keys = list(self._docs)
            spans = np.array([self._docs[k][:2] for k in keys], dtype=np.int64).reshape(-1, 2)
            checks = np.array([self._docs[k][2] for k in keys], dtype=np.int64)
            header = {"format": FORMAT_VERSION, "orders": list(self.orders), "keys": [list(k) if isinstance(k, tuple) else k for k in keys],
                      "meta": meta or {}}
            arrays = {"corpus": self._buf[: self._n], "spans": spans, "checks": checks}
            for n, o in self._ord.items():
                arrays[f"keys{n}"], arrays[f"pos{n}"] = o.keys, o.pos
            header_bytes = json.dumps(header).encode()
            arrays["header"] = np.frombuffer(header_bytes, dtype=np.uint8)
            arrays["crc"] = np.array([zlib.crc32(header_bytes) ^ zlib.crc32(self._buf[: self._n].tobytes())], dtype=np.int64)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, **kw: int | Sequence[int]) -> tuple[SuffixIndex, dict[str, object]]:
        """An index saved by :meth:`save`, and its ``meta``; :class:`CorruptIndexError` (one line) when the file
        is unreadable, damaged (its checksum) or was written with other orders or another format."""
        index = cls(**kw)  # type: ignore[arg-type]
        try:
            with np.load(Path(path), allow_pickle=False) as z:
                header_bytes = z["header"].tobytes()
                corpus = z["corpus"]
                if int(z["crc"][0]) != zlib.crc32(header_bytes) ^ zlib.crc32(corpus.astype(np.int32).tobytes()):
                    raise CorruptIndexError("its checksum does not match its contents")
                header = json.loads(header_bytes)
                if header.get("format") != FORMAT_VERSION:
                    raise CorruptIndexError(f"it has format {header.get('format')}, this specchat writes {FORMAT_VERSION}")
                if tuple(header.get("orders", ())) != index.orders:
                    raise CorruptIndexError("it was built with other n-gram orders")
                spans, checks = z["spans"], z["checks"]
                keys = [tuple(k) if isinstance(k, list) else k for k in header["keys"]]
                if len(keys) != len(spans) or len(keys) != len(checks):
                    raise CorruptIndexError("its document table is inconsistent")
                orders = {n: (z[f"keys{n}"], z[f"pos{n}"]) for n in index.orders}
        except CorruptIndexError:
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged zip, npy or JSON fails in many ways (BadZipFile, ...)
            raise CorruptIndexError(f"it cannot be read ({type(exc).__name__}: {exc})") from None
        n = len(corpus)
        if spans.size and (spans.min() < 0 or spans.max() > n):
            raise CorruptIndexError("its document table points outside its text")
        index._buf = np.full(n + n // 8 + 65536, SEP, dtype=np.int32)
        index._buf[:n] = corpus
        index._n = index._sorted_n = n
        for o in index._ord.values():
            o.keys, o.pos = orders[o.n]
            if len(o.keys) != len(o.pos) or (o.pos.size and (o.pos.min() < 0 or o.pos.max() >= n)):
                raise CorruptIndexError(f"its order-{o.n} table is inconsistent")
        index._docs = {k: (int(s), int(e), int(c)) for k, (s, e), c in zip(keys, spans.tolist(), checks.tolist())}
        index._index_starts()
        meta = header.get("meta", {})
        return index, meta if isinstance(meta, dict) else {}


__all__ = ["FORMAT_VERSION", "MAX_ANSWERS", "MAX_DRAFT", "MAX_HEADER", "ORDERS", "SEP", "Candidate", "CorruptIndexError", "Rename", "SuffixIndex"]
