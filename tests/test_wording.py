"""User-facing wording (issue 11): nothing in specchat or its README speaks of "the seed" (the project's
origin) or its "Step 5" - words only its authors know."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: "the seed's lesson", "(seed Step 5; ...)": the project's origin; "the seed" alone is the sampling seed
INSIDER = re.compile(r"(?i)\bseed's\b|\bseed step\b|\bstep 5\b")


def test_no_insider_words_in_the_code_or_the_readme():
    files = [ROOT / "README.md", *sorted((ROOT / "specchat").rglob("*.py"))]
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if INSIDER.search(line)
    ]
    assert hits == []
