"""Widgets of the terminal app: token view, chat column, sidebar, prompt."""
