"""The terminal app (Textual). Never imports llama_cpp: it receives an engine *factory*.

Entry point: :class:`specchat.tui.app.SpecChatApp`, built by :mod:`specchat.commands.tui`; the engine
thread and the engine's life are :class:`specchat.tui.engine_host.EngineHost`'s.
"""
