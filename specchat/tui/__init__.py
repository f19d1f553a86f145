"""The terminal app (Textual). Never imports llama_cpp: it receives an engine *factory*.

Entry point: :class:`specchat.tui.app.SpecChatApp`, built by :mod:`specchat.commands.tui`.
"""
