"""Modal screens: help, history browser."""
