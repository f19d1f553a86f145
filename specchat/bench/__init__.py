"""``specchat bench``: the speculation experiment on any pair in one command - baseline vs speculation, interleaved
A B A B, medians and pair ratios, and the cost model's arithmetic of why.

One concept per module:

* :mod:`~specchat.bench.suite` - the prompts measured (the default suite, suite files);
* :mod:`~specchat.bench.runner` - the plan (each mode paired with its own baseline run) and running it;
* :mod:`~specchat.bench.summary` - records -> one row per (prompt, mode): medians, acceptance, pair ratios;
* :mod:`~specchat.bench.arithmetic` - the engine's cost model calibrated on the pair, its predictions next
  to the measurements, the recommended K;
* :mod:`~specchat.bench.report` - what is printed and written (table, arithmetic, plot, JSON);
* :mod:`~specchat.bench.progress` - the one-line progress display on stderr;
* :mod:`~specchat.bench.command` - the command itself (arguments in :mod:`specchat.commands.bench`).

The package imports none of them: the tour's scenes (:mod:`specchat.demo`) use the suite at the TUI's start-up,
and the command's modules bring the engine's telemetry (numpy) and gguf, which the window does not wait for.
"""
