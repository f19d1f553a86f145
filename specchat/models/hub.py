"""Download hub presets into ``<data dir>/models/`` and verify them.

Downloads go through ``huggingface_hub``: :func:`hf_hub_url` builds the resolve URL (honouring ``HF_ENDPOINT``),
:func:`get_hf_file_metadata` asks the hub for the file's size, and :func:`huggingface_hub.file_download.http_get`
streams it with the token headers from :func:`build_hf_headers`, an HTTP ``Range`` to resume, and its own
retries on transient errors. ``hf_hub_download`` itself is not used because (huggingface_hub >= 1.x) it writes
to a process-unique temporary file that is deleted when a download fails or is interrupted, and re-downloads
any file in ``local_dir`` it did not write itself: a 4.7 GB download interrupted at 90 % would start over.
Here the bytes go to ``<file>.part``, which survives an interruption and is resumed on the next ``pull``.

A file counts as present when it has the expected byte size (pinned in the preset, else the size the hub
reports), starts with the GGUF magic, and its tensor table fits inside it (:func:`validate_gguf`). A local
file that is shorter than expected is resumed; one that is longer, or is not GGUF, is deleted and downloaded
again. An unreachable hub is one line naming the URL and the directory to download it into by hand.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from specchat.engine.gguf import GGUF_MAGIC, validate_gguf
from specchat.errors import ModelFileError, UserError
from specchat.models.presets import HubFile

PART_SUFFIX = ".part"
METADATA_TIMEOUT_S = 10.0


class HubError(UserError):
    """The hub cannot be reached, refuses the file, or sends something that is not the expected file."""


@dataclass(frozen=True)
class FileCheck:
    """The state of a local copy of a hub file."""

    status: str  # "ok", "missing", "partial" (shorter than expected: resumable) or "bad" (delete and re-download)
    size: int
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def check_file(path: Path, expected_size: int | None) -> FileCheck:
    """Is ``path`` a complete copy? Byte size (when known), GGUF magic, and the tensor-table truncation check."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return FileCheck("missing", 0, "not downloaded")
    if expected_size is not None and size > expected_size:
        return FileCheck("bad", size, f"{size} bytes, more than the expected {expected_size}")
    if size >= 4:
        with open(path, "rb") as fh:
            magic = fh.read(4)
        if magic != GGUF_MAGIC:
            return FileCheck("bad", size, f"starts with {magic!r}, not the GGUF magic")
    if expected_size is not None and size < expected_size:
        return FileCheck("partial", size, f"{size} of {expected_size} bytes")
    if size < 4:
        return FileCheck("partial", size, f"only {size} bytes")
    try:
        validate_gguf(path)
    except ModelFileError as exc:
        # the size is right (or unknown) but the header or tensor table does not fit the file
        return FileCheck("partial" if expected_size is None else "bad", size, str(exc))
    return FileCheck("ok", size, f"{size} bytes, GGUF verified")


def _network_errors() -> tuple[type[BaseException], ...]:
    """Transport-level exception classes of whichever HTTP stack huggingface_hub uses (plus OSError)."""
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx", "requests"):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        for name in ("TransportError", "TimeoutException", "ConnectionError", "Timeout", "RequestException"):
            cls = getattr(mod, name, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                errors.append(cls)
    return tuple(errors)


def _reason(exc: BaseException) -> str:
    """The innermost useful description of a network error ("Connection refused", "timed out", ...)."""
    seen = exc
    for _ in range(10):  # follow the cause chain to the socket error, but never loop forever
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            break
        seen = nxt
    for e in (seen, exc):
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.removeprefix("[Errno 111] ").strip()


def _unreachable(exc: BaseException, url: str, dest_dir: Path) -> HubError:
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled):
        return HubError(
            f"HF_HUB_OFFLINE is set, so {urlparse(url).netloc} is not contacted: unset it, "
            f"or download {url} by hand into {dest_dir}"
        )
    return HubError(
        f"cannot reach {urlparse(url).netloc} ({_reason(exc)}): check your network, "
        f"or download {url} by hand into {dest_dir}"
    )


def _http_error(exc: BaseException, url: str, dest_dir: Path) -> HubError:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if status in (401, 403):
        return HubError(
            f"{urlparse(url).netloc} refused {url} (HTTP {status}): the repository may be gated; "
            "log in with 'hf auth login' after accepting its licence, then pull again"
        )
    if status == 404:
        return HubError(f"{url} does not exist on the hub (HTTP 404): the preset is out of date; report it")
    return HubError(f"{urlparse(url).netloc} answered HTTP {status} for {url}: try again later, "
                    f"or download it by hand into {dest_dir}")


def pull_file(
    file: HubFile,
    models_dir: Path,
    *,
    force: bool = False,
    endpoint: str | None = None,
    say: Callable[[str], None] = lambda _msg: None,
) -> Path:
    """Make ``models_dir/file.filename`` a verified copy of the hub file; return its path.

    ``endpoint`` overrides ``HF_ENDPOINT`` / huggingface.co (tests point it at 127.0.0.1). In order: a
    verified local copy is kept; the hub says the file's size (:func:`_expected_size`); a partial copy is
    resumed (:func:`_resume_from`); the disk must hold the rest; the download (:func:`_download`) is
    verified before it replaces anything.
    """
    from huggingface_hub import hf_hub_url

    models_dir.mkdir(parents=True, exist_ok=True)
    dest = models_dir / file.filename
    part = dest.with_name(dest.name + PART_SUFFIX)
    if force:
        dest.unlink(missing_ok=True)
        part.unlink(missing_ok=True)
    elif file.size is not None and check_file(dest, file.size).ok:
        say(f"{file.filename}: already here ({file.size:,} bytes, GGUF verified)")
        return dest

    url = hf_hub_url(file.repo, file.filename, revision=file.revision, endpoint=endpoint)
    expected = _expected_size(file, url, dest, models_dir, say)
    if expected is None:  # the hub is unreachable and the local copy passes the GGUF checks (said)
        return dest
    state = check_file(dest, expected)
    if state.ok:
        say(f"{file.filename}: already here ({expected:,} bytes, GGUF verified)")
        return dest
    resume = _resume_from(file, dest, part, state, expected, say)

    free = shutil.disk_usage(models_dir).free
    if free < expected - resume:
        raise HubError(
            f"{file.filename} needs {expected - resume:,} more bytes but {models_dir} has {free:,} free; "
            "free some space or set data_dir to a larger disk"
        )
    say(f"{file.filename}: downloading {expected - resume:,} bytes" + (f" (resuming at {resume:,})" if resume else "")
        + f" from {urlparse(url).netloc}")
    _download(file, url, part, resume, expected, models_dir)

    final = check_file(part, expected)
    if not final.ok:
        if final.status == "bad" or final.size >= expected:
            part.unlink(missing_ok=True)
            raise HubError(f"the downloaded {file.filename} failed verification ({final.detail}); it was deleted: "
                           "pull again, or download it by hand")
        raise HubError(f"the download of {file.filename} stopped at {final.detail}; pull again to resume")
    os.replace(part, dest)
    say(f"{file.filename}: {expected:,} bytes, GGUF verified")
    return dest


def _expected_size(file: HubFile, url: str, dest: Path, models_dir: Path, say: Callable[[str], None]) -> int | None:
    """The file's size in bytes: the preset's, checked against what the hub reports (a file changed upstream
    is refused). None when the hub cannot be reached but the local copy is a complete GGUF and the preset
    pins no size: that copy is used (said), rather than failing."""
    from huggingface_hub import get_hf_file_metadata
    from huggingface_hub.errors import HfHubHTTPError

    try:
        meta = get_hf_file_metadata(url, timeout=METADATA_TIMEOUT_S)
    except HfHubHTTPError as exc:
        raise _http_error(exc, url, models_dir) from None
    except _network_errors() as exc:
        if file.size is None and check_file(dest, None).ok:
            # no pinned size to compare with, but the local copy is a complete GGUF: use it rather than fail
            say(f"{file.filename}: hub not reachable ({_reason(exc)}); the local copy passes the GGUF checks "
                "(its size could not be confirmed)")
            return None
        raise _unreachable(exc, url, models_dir) from None
    expected = file.size if file.size is not None else meta.size
    if expected is None:
        raise HubError(f"{urlparse(url).netloc} did not report the size of {url}; download it by hand into {models_dir}")
    if file.size is not None and meta.size is not None and meta.size != file.size:
        raise HubError(
            f"the hub's {file.filename} is {meta.size:,} bytes but the preset expects {file.size:,}: the file "
            f"changed upstream; download {url} by hand into {models_dir} if you trust it"
        )
    return expected


def _resume_from(
    file: HubFile, dest: Path, part: Path, state: FileCheck, expected: int, say: Callable[[str], None]
) -> int:
    """Where the download starts (bytes already in ``part``): a truncated local copy (``state``) is resumed
    from if it is longer than the partial download, a local copy that is not the hub file is deleted, and so
    is a partial download that is not a prefix of it."""
    if state.status == "partial":
        # a truncated copy (an old interrupted download, a half-finished copy): resume from it
        part_state = check_file(part, expected)
        if part_state.status in ("missing", "bad") or part_state.size <= state.size:
            os.replace(dest, part)
        else:
            dest.unlink()
        say(f"{file.filename}: local copy is incomplete ({state.detail}); resuming")
    elif state.status == "bad":
        say(f"{file.filename}: local copy is not the hub file ({state.detail}); downloading it again")
        dest.unlink()
    part_state = check_file(part, expected)
    if part_state.status == "bad":
        part.unlink()
        part_state = FileCheck("missing", 0)
    return part_state.size if part_state.status == "partial" else 0


def _download(file: HubFile, url: str, part: Path, resume: int, expected: int, models_dir: Path) -> None:
    """Download into ``part`` from byte ``resume``; a full disk and an unreachable hub are one-line errors, a
    size mismatch is left to the verification that follows."""
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    try:
        with open(part, "r+b" if part.exists() else "wb") as fh:
            fh.seek(resume)
            fh.truncate()
            http_get(url, fh, resume_size=resume, headers=build_hf_headers(), expected_size=expected,
                     displayed_filename=file.filename)
    except HfHubHTTPError as exc:
        raise _http_error(exc, url, models_dir) from None
    except _network_errors() as exc:
        if isinstance(exc, OSError) and exc.errno is not None and exc.errno == 28:  # ENOSPC
            raise HubError(f"no space left in {models_dir} while downloading {file.filename}; free some space "
                           "and pull again (the download resumes)") from None
        if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
            pass  # size mismatch: reported by the verification below
        else:
            raise _unreachable(exc, url, models_dir) from None
