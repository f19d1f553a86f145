"""Model files: where they are (bundled, presets, derived, configured), deriving demo pairs, pulling from a hub."""
