"""What produced a reply: the llama.cpp build and the CPU, stamped on every local :class:`~specchat.engine.events.Turn`
so that acceptance can be followed across builds (``specchat history stats``; llama.cpp users found silent
acceptance regressions between builds by counting by hand: ggml-org/llama.cpp#26750, 66.7 % -> 52.4 % between
b10261 and b10532).

The build is llama-cpp-python's version, which pins the llama.cpp it vendors and compiles; the CPU is the
calibration cache's identity (model name and a digest of the feature flags), the same key a v(K) timing is
kept under. Both are read once per process.
"""

from __future__ import annotations

from functools import cache

import llama_cpp

from specchat.engine.calibration_cache import cpu_identity


@cache
def engine_build() -> str:
    """``"llama-cpp-python 0.3.36"``: the build of llama.cpp this process decodes with."""
    return f"llama-cpp-python {llama_cpp.__version__}"


@cache
def this_cpu() -> str:
    """This machine's CPU as the calibration cache names it (:func:`cpu_identity`), read once."""
    return cpu_identity()


__all__ = ["engine_build", "this_cpu"]
