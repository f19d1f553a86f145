"""``specchat demo`` in a real terminal at 80x24 (issue 11): the app opens on the tour, shows scene 1's sentence,
runs the scene (deriving the demo models first, into the isolated data dir) to its verdict, moves to scene 2
and quits cleanly with ctrl+q while that scene is being recorded."""

from __future__ import annotations

import pytest
from ptyapp import PtyApp

from specchat import demo


def _flat(screen: str) -> str:
    return " ".join(screen.split())


@pytest.mark.slow
def test_specchat_demo_opens_the_tour_and_quits_cleanly_at_80x24(tmp_path):
    first, second = demo.SCENES[0], demo.SCENES[1]
    with PtyApp(tmp_path, ["demo", "--n-predict", "16"], cols=80, rows=24) as app:
        app.wait_for(lambda s: first.sentence in _flat(s), timeout=120, what="scene 1's sentence")
        screen = app.wait_for(
            lambda s: any(f"\u00d7 \u2014 {v}" in _flat(s) for v in ("helps", "neutral", "hurts")),
            timeout=300, what="scene 1's verdict",
        )
        # the helps scenes run on this machine's pick among the candidates (demo.pick_helps_pair)
        labels = [p.label for p in demo.helps_candidates(tmp_path / "data")]
        assert f"Scene 1 of {len(demo.SCENES)}" in screen and any(label in _flat(screen) for label in labels), _flat(screen)
        app.write("n")
        app.wait_for(lambda s: f"Scene 2 of {len(demo.SCENES)}" in s and second.sentence in _flat(s), timeout=60, what="scene 2")
        assert app.quit(timeout=120) == 0
    assert any((tmp_path / "data").rglob("*layerskip*.gguf"))  # the demo pair was derived into the data dir
