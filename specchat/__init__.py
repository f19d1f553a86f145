"""specchat: speculative decoding you can watch, in the terminal."""

__version__ = "0.1.0"
