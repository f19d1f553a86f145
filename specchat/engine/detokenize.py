"""Token ids -> the text of each token, exactly as a reply streams: incremental UTF-8 decoding.

A token's bytes (``llama_token_to_piece``) need not be whole UTF-8 characters: byte-level vocabularies split
a multi-byte character across tokens. Each token's text is therefore decoded *incrementally*: a character
split across tokens appears whole on the token that completes it (the earlier tokens give ``""``), and bytes
that can never form a character become U+FFFD. An unfinished character at the end of a reply is flushed by
:meth:`PieceDecoder.finish` as U+FFFD.

:class:`PieceDecoder` is that decoding, one token at a time (the speculative loop streams with it);
:func:`detokenize_pieces` applies it to a whole reply (saved replies redrawn token by token).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence


class PieceDecoder:
    """The text of each token of one token stream, in order. One instance per reply.

    ``piece(token) -> bytes`` gives a token's raw bytes (:meth:`specchat.engine.model.Model.piece`).
    """

    def __init__(self, piece: Callable[[int], bytes]) -> None:
        self._piece = piece
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def decode(self, token: int) -> str:
        """The text this token adds to the stream (``""`` while a split character is still incomplete)."""
        return self._utf8.decode(self._piece(int(token)))

    def finish(self) -> str:
        """The end of the stream: ``"\ufffd"`` for an unfinished character, else ``""``."""
        return self._utf8.decode(b"", final=True)


def detokenize_pieces(piece: Callable[[int], bytes], tokens: Sequence[int]) -> list[str]:
    """One string per token, decoded as :class:`PieceDecoder` streams them; the end-of-stream U+FFFD (if
    any) is put on the last token, so ``"".join(result)`` is the whole reply text.
    """
    decoder = PieceDecoder(piece)
    pieces = [decoder.decode(token) for token in tokens]
    tail = decoder.finish()
    if tail and pieces:
        pieces[-1] += tail
    return pieces
