"""The K a turn used (Turn.k_min / k_max) on the real engine: a K changed mid-reply shows as a range."""

from __future__ import annotations

from specchat.config import Settings
from specchat.engine.events import Step, Turn
from specchat.loading import load_engine


def test_a_k_changed_mid_reply_is_recorded_as_the_turns_k_range(tmp_path, tiny_pair, greedy_prompts):
    target, draft = tiny_pair
    settings = Settings(
        target=str(target), draft=str(draft), k=3, auto_k=False, n_predict=60, n_ctx=1024, threads=1, data_dir=tmp_path
    )
    engine = load_engine(settings)
    try:
        steps: list[Step] = []
        turn = None
        for event in engine.send(greedy_prompts[0]):
            if isinstance(event, Step):
                steps.append(event)
                if len(steps) == 3:
                    engine.controls.set_k(6)  # applies from the next round, as the app's key does
            elif isinstance(event, Turn):
                turn = event
        assert turn is not None and len(steps) > 4
        drafting = [s.k for s in steps if s.k > 0]
        assert drafting[:3] == [3, 3, 3] and 6 in drafting
        # the range of the rounds' K (the last rounds of a reply cut by n_predict may ask for less: the tokens
        # left cap K, and that is the K those rounds used)
        assert (turn.k, turn.k_min, turn.k_max) == (6, min(drafting), 6)
    finally:
        engine.close()
