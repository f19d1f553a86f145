"""Subcommands of the ``specchat`` CLI, one module each."""
