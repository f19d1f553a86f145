"""The prompts the bench measures: the default suite (code, prose, a copy-heavy edit, a long-context summary, an
edit that copies a block and then writes new text) and suite files of ``{name, prompt}`` entries (TOML or JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specchat.bench.history_suite import HISTORY_SUITE, history_suite
from specchat.errors import UserError

_COPY_CODE = '''\
def summarize_scores(records):
    """Return statistics about the score field of a list of records."""
    x = 0
    total = 0.0
    best = None
    worst = None
    names = []
    for record in records:
        score = record.get("score")
        if score is None:
            continue
        x = x + 1
        total = total + score
        if best is None or score > best:
            best = score
        if worst is None or score < worst:
            worst = score
        names.append(record.get("name", "unknown"))
    if x == 0:
        return {"count": 0, "mean": None, "best": None, "worst": None}
    mean = total / x
    spread = best - worst
    report = {
        "count": x,
        "mean": round(mean, 3),
        "best": best,
        "worst": worst,
        "spread": spread,
        "names": sorted(names),
    }
    if x > 10:
        report["note"] = "large sample"
    elif x > 3:
        report["note"] = "medium sample"
    else:
        report["note"] = "small sample"
    print("processed", x, "records")
    return report
'''

_PASSAGE = """\
The town of Harwick grew up around a river crossing, and for most of its history the river was both its \
fortune and its trouble. In the early years the crossing was a ford, usable only in late summer, and the \
farmers who lived on the eastern bank had to carry their grain north for two days to reach the nearest \
bridge. When a group of them pooled their savings to build a timber bridge, the town gained its first \
reliable link to the markets on the western side. The bridge was rebuilt three times in fifty years: \
twice after spring floods carried away the piers, and once after a fire started by a careless blacksmith \
whose forge stood too close to the timbers.

The floods were the larger problem. Every few years melting snow in the hills raised the river by several \
metres within a single night, and the low streets near the water were flooded to the height of a door. \
Families who lived there kept their food and their bedding on upper shelves and learned to read the colour \
of the water as a warning: when it turned from green to brown, the flood was a day away. The town council \
debated for decades whether to build an embankment. The merchants wanted one, because their warehouses \
stood on the low ground; the millers opposed it, because an embankment would change the flow that turned \
their wheels; and the farmers downstream feared that a wall in Harwick would simply send the water onto \
their fields instead.

The debate was settled not by argument but by a particularly bad winter. After a season of heavy snow, \
the spring flood came faster than anyone alive could remember. It destroyed the bridge for the fourth \
time, drowned livestock, ruined the stores of grain in every warehouse near the river and left a layer of \
mud in the church that took weeks to clear. Two people died trying to rescue animals from a stable. In the \
months that followed, the council hired an engineer from the capital, a quiet woman named Elsa Marren, who \
had built drainage works in the marshes along the coast.

Marren spent her first summer walking the river from the hills to the sea. She measured its width and \
depth at dozens of points, recorded the marks that earlier floods had left on trees and walls, and \
interviewed the oldest residents about the floods they remembered. Her conclusion surprised the council. \
An embankment alone, she wrote, would protect the town for a few years and then fail, because the river \
carried so much silt that its bed rose a little every year; a wall would only make the river run higher \
between its banks until one day it broke through. Instead she proposed three works together: a relief \
channel that would carry flood water around the town through the old meadows to the south, a set of \
sluice gates at the head of that channel, and a modest embankment along the streets that flooded most \
often.

The plan was expensive, and for a year it seemed it would never be built. The millers still objected, \
since the relief channel would take water away from their wheels during the driest weeks, and the owners \
of the southern meadows did not want a channel cut through their grazing land. Marren met each group \
separately. For the millers she designed the sluice gates so that they would stay closed except when the \
river rose above a marked level, which meant that in ordinary seasons the mills would receive exactly as \
much water as before. For the landowners she proposed that the channel banks be planted as hay meadows, \
flooded for a few days in the worst years but otherwise as useful as the fields they replaced, and the \
council agreed to pay them a yearly rent for the land.

Construction took four summers. Most of the labour came from the town itself, from farm workers who were \
idle between the planting and the harvest, and the council paid them partly in money and partly in a \
reduction of their taxes. The sluice gates were made of oak and iron and were opened and closed by a pair \
of large wheels that two men could turn together. A keeper was appointed to live in a small house beside \
the gates, to watch the river level and to open the gates when the water reached the mark that Marren had \
cut into a stone post. The first keeper was a former soldier who kept a careful diary of the river level \
every morning and evening for thirty years; his notebooks are still kept in the town library and have \
been used by later engineers to study how the river changed.

The works were tested sooner than anyone expected. In the second spring after they were finished, a flood \
almost as large as the one that had destroyed the bridge came down from the hills. The keeper opened the \
gates at midnight, and by morning the relief channel was a wide brown river of its own, running through \
the southern meadows while the streets of Harwick stayed dry. The new stone bridge, built at the same time \
as the channel, stood without damage. The merchants held a dinner in Marren's honour, and even the millers, \
whose wheels had turned all through the flood, admitted that the scheme had worked.

Over the following century the town grew well beyond the area the works had been designed to protect. New \
houses were built on the southern edge of the meadows, closer to the channel than Marren would have \
allowed, and in two later floods their cellars filled with water. Each time the council debated whether to \
widen the channel or to forbid building near it, and each time it chose the cheaper course of raising the \
embankment a little. Modern engineers who have studied the river say that the original design remains \
sound, but that it depends on keeping the relief channel and its meadows free of buildings, which is a \
question of planning rather than engineering.

The works also changed the life of the town in ways nobody had planned. With the low streets safe from \
the water, the merchants built larger warehouses there, and within a generation the riverside had become \
the busiest part of Harwick, with a market every week and an inn for the carters who brought goods from \
the hills. The meadows along the relief channel, flooded now and then with water rich in silt, gave better \
hay than any field nearby, and the landowners who had fought the channel ended up asking the council to \
flood them more often. The old ford, no longer needed, silted up and became a shallow pool where children \
learned to swim in summer and where the keeper's successors measured the river's clarity each spring.

Today the sluice gates are operated by electric motors, and the keeper's house is a small museum. Visitors \
can see the original wheels, the stone post with its flood mark, and a copy of Marren's report, in which \
she wrote that a river cannot be defeated, only given room. The phrase is painted above the door of the \
museum, and schoolchildren in Harwick still learn it, usually without knowing who first wrote it.\
"""

#: the first 12 lines of the copy-heavy code: short enough that the reply goes on past the copy
_COPY_HEAD = "\n".join(_COPY_CODE.splitlines()[:12])

DEFAULT_SUITE: tuple[dict[str, str], ...] = (
    {
        "name": "code",
        "prompt": "Write a Python function that checks whether a number is prime, with a docstring and tests.",
    },
    {"name": "prose", "prompt": "Write a short story about a lighthouse keeper."},
    {
        "name": "copy-heavy",
        "prompt": "Rename the variable x to count in this code and return the full code.\n\n"
        f"```python\n{_COPY_CODE}```",
    },
    {
        "name": "summary",
        "prompt": f"Summarise the following passage in one paragraph.\n\n{_PASSAGE}",
    },
    # a reply that copies a block and then writes new text, as an edit with an explanation does: where adapting
    # K within one reply should beat every fixed K (issue 20). The bundled SmolLM2 copies these 12 lines and then
    # writes code of its own (it does not follow "then explain" instructions; measured with its greedy reply)
    {
        "name": "copy-then-new",
        "prompt": "Rename the variable x to count in this code and return the full code.\n\n"
        f"```python\n{_COPY_HEAD}\n```",
    },
)


def load_suite(spec: str | None) -> list[dict[str, str]]:
    """``default`` (or None) -> :data:`DEFAULT_SUITE`; ``history`` -> the workload with history
    (:mod:`specchat.bench.history_suite`); else a TOML or JSON file holding a list of
    ``{name, prompt}`` tables (JSON: a list, or an object with a ``prompts`` list; TOML: ``[[prompts]]``)."""
    if spec in (None, "", "default"):
        return [dict(p) for p in DEFAULT_SUITE]
    if spec == HISTORY_SUITE:  # a new task of a kind the history holds (earlier conversations saved first)
        return history_suite()
    path = Path(spec).expanduser()
    if not path.is_file():
        raise UserError(f"suite file {path} does not exist: give a TOML/JSON file of {{name, prompt}} entries or --suite default")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read suite file {path}: {exc}") from None
    import tomllib

    suffix = path.suffix.lower()
    fmt = "json" if suffix == ".json" else "toml" if suffix == ".toml" else None
    data: Any = None
    if fmt in ("json", None):
        try:
            data = json.loads(text)
            fmt = "json"
        except json.JSONDecodeError as exc:
            if fmt == "json":
                raise UserError(f"suite file {path} is not valid JSON (line {exc.lineno}: {exc.msg}); expected a list of {{name, prompt}}") from None
    if fmt in ("toml", None):
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            what = "TOML" if fmt == "toml" else "JSON or TOML"
            raise UserError(f"suite file {path} is not valid {what} ({exc}); expected [[prompts]] tables with name and prompt") from None
    if isinstance(data, dict):
        data = data.get("prompts")
    if not isinstance(data, list) or not data:
        raise UserError(f"suite file {path} has no prompts: expected a non-empty list of {{name, prompt}} ([[prompts]] in TOML)")
    suite: list[dict[str, str]] = []
    seen: set[str] = set()
    for i, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise UserError(f"suite file {path}: entry {i} is not a table with name and prompt")
        name, prompt = item.get("name"), item.get("prompt")
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"suite file {path}: entry {i} needs a non-empty string 'name'")
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError(f"suite file {path}: entry {i} ({name}) needs a non-empty string 'prompt'")
        extra = set(item) - {"name", "prompt"}
        if extra:
            raise UserError(f"suite file {path}: entry {i} ({name}) has unknown key {sorted(extra)[0]!r}; only name and prompt are read")
        if name in seen:
            raise UserError(f"suite file {path}: prompt name {name!r} appears twice; names must be unique")
        seen.add(name)
        suite.append({"name": name, "prompt": prompt})
    return suite


__all__ = ["DEFAULT_SUITE", "load_suite"]
