"""The speculative engine: llama-cpp-python + numpy (or a llama-server over HTTP), never Textual.

The UI knows the engine only through :mod:`specchat.engine.events` (what it emits) and
:mod:`specchat.engine.controls` (what can be changed from another thread).
"""
