"""specchat: speculative decoding you can watch, in the terminal."""

import os as _os

# llama.cpp's CPU backend runs on OpenMP, whose default "active" wait spins between ops. On a 2-core
# machine that collapses throughput (measured here: 20-35 tok/s instead of 60+) as soon as any other
# process wants a core. libgomp reads this when llama_cpp's library loads, so it is set here, before
# any specchat module can import llama_cpp. A user's own OMP_WAIT_POLICY wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
