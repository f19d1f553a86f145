"""The HTTP client of one llama-server: its endpoints, its streamed completions, and one-line errors.

What specchat asks of the server (the facts behind each choice are in :mod:`specchat.engine.remote`):
``GET /health`` and ``GET /props`` to know it is a llama-server and ready, ``GET /slots`` (whether it
speculates), ``GET /v1/models`` (the model's size and vocabulary: do two servers hold the same weights?), ``GET
/metrics`` (its speculation counters, if started with ``--metrics``), ``POST
/apply-template`` (the model's chat template, rendered by the server), ``POST /tokenize`` and ``POST
/detokenize``, and ``POST /completion`` streamed as server-sent events (``data: {json}`` lines).

**Client library: httpx2** (the maintained continuation of HTTPX, same API). It is already in specchat's
dependency tree (``huggingface-hub`` requires it), so it adds nothing to install; it has a synchronous
streaming API (the engine runs in one worker thread, like the local one), separate connect / read /
write / pool timeouts, and typed exceptions that map onto the one-line errors below. ``requests`` would
also do, but has no per-phase timeouts and would be one more package.

**Connections.** A streamed completion is sent with ``Connection: close``: llama-server (cpp-httplib)
closed the connection after a streamed reply, and the next request on that pooled connection failed with
"Server disconnected without sending a response" (seen here on b11434). Closing the stream early (a stop)
is how generation is cancelled: the server notices the closed connection at its next chunk and releases
the slot (measured: idle within 1 s, ~20 tokens after the close, of a 400-token request).

**Timeouts and retries.** Connecting times out after ``connect_timeout`` (5 s); a read after
``read_timeout`` (120 s without a byte: prompt processing streams progress chunks, so a long prompt does
not trip it). Requests without side effects are retried up to ``retries`` times on a refused or dropped
connection (waits 0.25, 0.5, 1, 2, 2 s ...); a completion only when no byte of its reply arrived. A server
still loading its model (``503``, "Loading model") is waited for up to ``loading_wait`` seconds. Every
failure becomes a :class:`ServerError`: one line saying what failed, at which URL, and what to do.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx

from specchat.errors import UserError

DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_READ_TIMEOUT_S = 120.0
DEFAULT_RETRIES = 3
DEFAULT_LOADING_WAIT_S = 120.0
_RETRY_WAIT_S = 0.25
_RETRY_WAIT_MAX_S = 2.0


class ServerError(UserError):
    """llama-server could not be reached, or answered something specchat cannot use (one line)."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``/props`` and ``/slots`` say about the server."""

    url: str
    model: str  # the model's alias, or its file name
    n_ctx: int  # context of one slot
    total_slots: int
    build_info: str  # the server's own "b<number>-<commit>" ("b0-unknown" for builds without git metadata)
    speculative: bool | None  # a slot speculates (/slots); None when /slots is off (--no-slots)
    metrics: bool  # /metrics is on (--metrics)
    spec_types: str = ""  # the speculative types of the slot's last request, e.g. "draft-simple" ("" before one)


@dataclass(frozen=True, slots=True)
class SpecMetrics:
    """llama-server's speculation counters from ``GET /metrics`` (Prometheus text, ``llamacpp:`` names).

    ``accepted_per_pos[i]`` = draft tokens accepted at draft position i (``position="i"``, 0-based); the server
    sizes that list by its draft length (``common_speculative_n_max``) and lists it once it has speculated.
    """

    draft_tokens: float = 0.0  # spec_decode_num_draft_tokens_total
    accepted_tokens: float = 0.0  # spec_decode_num_accepted_tokens_total
    drafts: float = 0.0  # spec_decode_num_drafts_total: verify steps that had a draft
    accepted_per_pos: tuple[float, ...] = ()
    tokens_predicted: float = 0.0  # tokens_predicted_total (updated when a request ends)
    requests_processing: float = 0.0

    @classmethod
    def parse(cls, text: str) -> SpecMetrics:
        values: dict[str, float] = {}
        per_pos: dict[int, float] = {}
        for m in re.finditer(r"^llamacpp:(\w+)(\{[^}]*\})? (\S+)$", text, re.M):
            name, labels, raw = m.groups()
            try:
                value = float(raw)
            except ValueError:
                continue
            if name == "spec_decode_num_accepted_tokens_per_pos_total" and labels:
                pos = re.search(r'position="(\d+)"', labels)
                if pos:
                    per_pos[int(pos.group(1))] = value
            elif not labels:
                values[name] = value
        n = max(per_pos) + 1 if per_pos else 0
        return cls(
            draft_tokens=values.get("spec_decode_num_draft_tokens_total", 0.0),
            accepted_tokens=values.get("spec_decode_num_accepted_tokens_total", 0.0),
            drafts=values.get("spec_decode_num_drafts_total", 0.0),
            accepted_per_pos=tuple(per_pos.get(i, 0.0) for i in range(n)),
            tokens_predicted=values.get("tokens_predicted_total", 0.0),
            requests_processing=values.get("requests_processing", 0.0),
        )

    def minus(self, before: SpecMetrics) -> SpecMetrics:
        """The counters' growth since ``before`` (gauges keep their current value)."""
        n = max(len(self.accepted_per_pos), len(before.accepted_per_pos))
        mine = self.accepted_per_pos + (0.0,) * (n - len(self.accepted_per_pos))
        old = before.accepted_per_pos + (0.0,) * (n - len(before.accepted_per_pos))
        return SpecMetrics(
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted_tokens=self.accepted_tokens - before.accepted_tokens,
            drafts=self.drafts - before.drafts,
            accepted_per_pos=tuple(a - b for a, b in zip(mine, old)),
            tokens_predicted=self.tokens_predicted - before.tokens_predicted,
            requests_processing=self.requests_processing,
        )


@dataclass(frozen=True, slots=True)
class Chunk:
    """One streamed ``/completion`` chunk."""

    text: str
    tokens: tuple[int, ...]  # ids the chunk names: only the last of its tokens (held-back ones are not named)
    tokens_predicted: int  # tokens generated so far (the count of this chunk's tokens is its growth)
    draft_n: int | None  # cumulative; None until the request's first verified draft
    draft_n_accepted: int | None
    predicted_ms: float | None
    prompt_n: int | None
    prompt_ms: float | None
    cache_n: int | None
    progress: bool  # a prompt-processing progress chunk (no token)
    stop: bool  # the last chunk
    stop_type: str  # "eos", "limit", "word", "none"; "" before the last chunk

    @classmethod
    def parse(cls, data: dict[str, Any]) -> Chunk:
        timings = data.get("timings") or {}
        return cls(
            text=str(data.get("content") or ""),
            tokens=tuple(int(t) for t in data.get("tokens") or ()),
            tokens_predicted=int(data.get("tokens_predicted") or 0),
            draft_n=_opt_int(timings.get("draft_n")),
            draft_n_accepted=_opt_int(timings.get("draft_n_accepted")),
            predicted_ms=_opt_float(timings.get("predicted_ms")),
            prompt_n=_opt_int(timings.get("prompt_n")),
            prompt_ms=_opt_float(timings.get("prompt_ms")),
            cache_n=_opt_int(timings.get("cache_n")),
            progress="prompt_progress" in data,
            stop=bool(data.get("stop")),
            stop_type=str(data.get("stop_type") or ""),
        )


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


class StreamBroken(ServerError):
    """The connection failed after the reply had started (the partial reply is still usable)."""


class LlamaServer:
    """One llama-server at ``url``; every method raises :class:`ServerError` with one line on failure.

    Holds its own connection pool and nothing global, so several can be used side by side (one per engine).
    """

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        loading_wait: float = DEFAULT_LOADING_WAIT_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.retries = retries
        self.loading_wait = loading_wait
        self._sleep = sleep
        timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._client = httpx.Client(base_url=self.url + "/", timeout=timeout, follow_redirects=False)

    def close(self) -> None:
        self._client.close()

    # -- errors ---------------------------------------------------------------------------------------
    def _transport_error(self, exc: Exception, what: str) -> ServerError:
        """One line for an httpx failure during ``what`` (e.g. "GET /props")."""
        url = self.url
        text = str(exc)
        if isinstance(exc, httpx.ConnectTimeout):
            return ServerError(
                f"llama-server at {url} did not accept a connection within {self.connect_timeout:g} s ({what}); "
                "check the address and that the server is running"
            )
        if isinstance(exc, httpx.ConnectError):
            if "refused" in text.lower() or "errno 111" in text.lower():
                return ServerError(
                    f"cannot connect to llama-server at {url}: connection refused ({what}); start llama-server "
                    "there (llama-server -m MODEL --port PORT) or fix --server / server_url"
                )
            if any(s in text.lower() for s in ("name or service", "nodename", "name resolution", "getaddrinfo")):
                return ServerError(
                    f"cannot resolve the host of {url} ({what}): {text}; check the host name in --server / server_url"
                )
            return ServerError(f"cannot connect to llama-server at {url} ({what}): {text or type(exc).__name__}")
        if isinstance(exc, httpx.ReadTimeout):
            return ServerError(
                f"llama-server at {url} sent nothing for {self.read_timeout:g} s ({what}); it may be overloaded "
                "or hung: check its log"
            )
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            return ServerError(
                f"llama-server at {url} closed the connection ({what}): {text or type(exc).__name__}; it may "
                "have stopped or crashed: check its log"
            )
        if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
            return ServerError(f"{url} is not a usable server URL ({text}); give e.g. http://127.0.0.1:8080")
        return ServerError(f"talking to llama-server at {url} failed ({what}): {type(exc).__name__}: {text}")

    def _status_error(self, response: httpx.Response, what: str) -> ServerError:
        url = self.url
        code = response.status_code
        message = _error_message(response)
        if code == 404:
            return ServerError(
                f"{url} is not a llama-server URL: {what} answered 404 Not Found; give the server's base URL, "
                "e.g. http://127.0.0.1:8080"
            )
        if code in (401, 403):
            return ServerError(
                f"llama-server at {url} refused {what} ({code}{': ' + message if message else ''}); it was "
                "started with --api-key, which specchat does not send: run it without one"
            )
        detail = f": {message}" if message else ""
        return ServerError(f"llama-server at {url} answered {code} to {what}{detail}")

    # -- plain requests -------------------------------------------------------------------------------
    def _request(self, method: str, path: str, *, body: Any = None, allow: tuple[int, ...] = ()) -> httpx.Response:
        """Send a request without side effects, retrying a refused or dropped connection."""
        what = f"{method} {path}"
        wait = _RETRY_WAIT_S
        for attempt in range(self.retries + 1):
            try:
                response = self._client.request(method, path.lstrip("/"), json=body)
            except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
                if attempt == self.retries:
                    raise self._transport_error(exc, what) from None
                self._sleep(wait)
                wait = min(wait * 2, _RETRY_WAIT_MAX_S)
                continue
            except httpx.HTTPError as exc:
                raise self._transport_error(exc, what) from None
            if response.status_code >= 400 and response.status_code not in allow:
                raise self._status_error(response, what)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        response = self._request(method, path, body=body)
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise ServerError(
                f"{self.url} does not look like llama-server: {method} {path} answered {kind}, not JSON; "
                "check the URL (--server / server_url)"
            ) from None

    def wait_ready(self, progress: Callable[[str], None] | None = None) -> None:
        """``GET /health`` until the server has loaded its model (``503`` "Loading model" meanwhile)."""
        deadline = time.monotonic() + self.loading_wait
        while True:
            response = self._request("GET", "/health", allow=(503,))
            if response.status_code != 503:
                return
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"llama-server at {self.url} is still loading its model after {self.loading_wait:g} s "
                    "(GET /health answered 503); try again when its log says the model is loaded"
                )
            if progress is not None:
                progress(f"llama-server at {self.url} is loading its model")
            self._sleep(0.5)

    def info(self) -> ServerInfo:
        """``/props`` (and ``/slots``): refuses a server that is not llama-server."""
        props = self._json("GET", "/props")
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        if not isinstance(settings, dict) or "total_slots" not in props:
            raise ServerError(
                f"{self.url} does not look like llama-server: GET /props has no default_generation_settings "
                "or total_slots; check the URL (--server / server_url)"
            )
        model = str(props.get("model_alias") or props.get("model_path") or "model")
        model = model.replace("\\", "/").rsplit("/", 1)[-1]
        speculative: bool | None = None
        spec_types = ""
        if props.get("endpoint_slots", True):
            slots = self.slots()
            if slots and "speculative" in slots[0]:
                speculative = bool(slots[0]["speculative"])
                spec_types = spec_types_of(slots[0])
        return ServerInfo(
            url=self.url,
            model=model,
            n_ctx=int(settings.get("n_ctx") or 0),
            total_slots=int(props.get("total_slots") or 1),
            build_info=str(props.get("build_info") or ""),
            speculative=speculative,
            metrics=bool(props.get("endpoint_metrics", False)),
            spec_types=spec_types,
        )

    def slots(self) -> list[dict[str, Any]]:
        data = self._json("GET", "/slots")
        return [slot for slot in data if isinstance(slot, dict)] if isinstance(data, list) else []

    def metrics(self) -> SpecMetrics:
        return SpecMetrics.parse(self._request("GET", "/metrics").text)

    def apply_template(self, messages: list[dict[str, str]]) -> str:
        data = self._json("POST", "/apply-template", {"messages": messages})
        if not isinstance(data, dict) or not isinstance(data.get("prompt"), str):
            raise ServerError(f"llama-server at {self.url}: POST /apply-template returned no prompt")
        return data["prompt"]

    def tokenize(self, text: str, *, add_special: bool = False) -> list[int]:
        """Token ids of ``text`` (special tokens such as ``<|im_start|>`` parsed as such)."""
        data = self._json("POST", "/tokenize", {"content": text, "add_special": add_special, "parse_special": True})
        return [int(t) for t in data.get("tokens", [])]

    def token_pieces(self, text: str) -> list[tuple[int, bytes]]:
        """``(id, bytes)`` of each token of ``text`` (``with_pieces``: a piece that is not valid UTF-8 on
        its own comes as a list of byte values)."""
        data = self._json(
            "POST", "/tokenize", {"content": text, "add_special": False, "parse_special": False, "with_pieces": True}
        )
        out = []
        for item in data.get("tokens", []):
            piece = item.get("piece", "")
            raw = bytes(piece) if isinstance(piece, list) else str(piece).encode("utf-8")
            out.append((int(item["id"]), raw))
        return out

    def detokenize(self, tokens: list[int]) -> str:
        data = self._json("POST", "/detokenize", {"tokens": list(tokens)})
        return str(data.get("content", ""))

    def model_meta(self) -> dict[str, Any]:
        """The loaded model's figures from ``GET /v1/models`` (``data[0].meta``: ``n_vocab``, ``n_params``,
        ``size``, ``ftype``, ...; measured on b11434), ``{}`` if the server does not report them."""
        data = self._json("GET", "/v1/models")
        models = data.get("data") if isinstance(data, dict) else None
        meta = models[0].get("meta") if isinstance(models, list) and models and isinstance(models[0], dict) else None
        return dict(meta) if isinstance(meta, dict) else {}

    def top_logprobs(self, tokens: list[int], n: int) -> dict[int, float]:
        """The ``n`` most likely next tokens after ``tokens`` and their log-probabilities, as the model scores
        them before sampling (``/completion`` with ``n_probs``, ``n_predict`` 1, no prompt cache: the context
        is decoded in one batch). Log-probabilities share the softmax's normaliser, so the difference of
        two is the difference of their logits."""
        body = {"prompt": list(tokens), "n_predict": 1, "n_probs": n, "temperature": 0.0, "cache_prompt": False,
                "post_sampling_probs": False}
        data = self._json("POST", "/completion", body)
        probs = data.get("completion_probabilities") if isinstance(data, dict) else None
        if not isinstance(probs, list) or not probs or not isinstance(probs[0], dict):
            raise ServerError(f"llama-server at {self.url}: POST /completion with n_probs returned no probabilities")
        return {int(p["id"]): float(p["logprob"]) for p in probs[0].get("top_logprobs") or () if "id" in p}

    # -- the streamed completion ----------------------------------------------------------------------
    @contextmanager
    def completion(self, body: dict[str, Any]) -> Iterator[Iterator[Chunk]]:
        """``POST /completion`` with ``"stream": true``; yields an iterator of :class:`Chunk`.

        Leaving the ``with`` block closes the connection: if the reply is not finished, that is how it is
        cancelled on the server. A failure before the first chunk raises :class:`ServerError`; one after it
        raises :class:`StreamBroken` from the iterator.
        """
        what = "POST /completion"
        request = self._client.build_request(
            "POST", "completion", json={**body, "stream": True}, headers={"Connection": "close"}
        )
        wait = _RETRY_WAIT_S
        response: httpx.Response | None = None
        for attempt in range(self.retries + 1):
            try:
                response = self._client.send(request, stream=True)
                break
            except (httpx.ConnectError, httpx.RemoteProtocolError) as exc:
                # nothing of the reply arrived: the request did not start a generation
                if attempt == self.retries:
                    raise self._transport_error(exc, what) from None
                self._sleep(wait)
                wait = min(wait * 2, _RETRY_WAIT_MAX_S)
            except httpx.HTTPError as exc:
                raise self._transport_error(exc, what) from None
        assert response is not None
        try:
            if response.status_code >= 400:
                response.read()
                raise self._status_error(response, what)
            yield self._chunks(response, what)
        finally:
            response.close()

    def _chunks(self, response: httpx.Response, what: str) -> Iterator[Chunk]:
        try:
            for line in response.iter_lines():
                if not line.startswith(("data:", "error:")):
                    continue
                payload = line.split(":", 1)[1].strip()
                if payload == "[DONE]":
                    return
                try:
                    data = json.loads(payload)
                except ValueError:
                    raise StreamBroken(
                        f"llama-server at {self.url} sent a chunk that is not JSON ({what}): {payload[:80]!r}"
                    ) from None
                if not isinstance(data, dict):
                    continue
                if "error" in data:
                    err = data["error"]
                    message = err.get("message") if isinstance(err, dict) else str(err)
                    raise StreamBroken(f"llama-server at {self.url} reported an error mid-reply: {message}")
                yield Chunk.parse(data)
        except httpx.HTTPError as exc:
            error = self._transport_error(exc, what)
            raise StreamBroken(str(error)) from None


def spec_types_of(slot: dict[str, Any]) -> str:
    """A slot's speculative types without "none" (``params["speculative.types"]``, e.g. "none,draft-simple"
    -> "draft-simple"); the params are there once the slot has served a request."""
    types = (slot.get("params") or {}).get("speculative.types", "")
    return ",".join(t for t in str(types).split(",") if t and t != "none")


def _error_message(response: httpx.Response) -> str:
    """llama-server's ``{"error": {"message": ...}}``, or the start of the body."""
    try:
        data = response.json()
    except ValueError:
        return response.text.strip().splitlines()[0][:120] if response.text.strip() else ""
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("message", ""))
    return ""


__all__ = [
    "Chunk",
    "LlamaServer",
    "ServerError",
    "ServerInfo",
    "SpecMetrics",
    "StreamBroken",
]
