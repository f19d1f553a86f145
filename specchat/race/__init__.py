"""The race: one message answered with speculation off and then on, recorded piece by piece, and replayed
side by side by time.

One concept per module (none imports llama_cpp or Textual: the sessions are passed in):

* :mod:`~specchat.race.record` - recording the two runs on the engine thread (:func:`record_race`, or two
  llama-servers: :func:`record_server_race`), cancelling, and what a race is (:class:`RaceResult`,
  :class:`RaceRun`, :class:`TimedPiece`);
* :mod:`~specchat.race.verdict` - where the two texts part and whether that is a near-tie or a defect
  (:func:`local_difference`, :func:`server_difference`, :data:`NEAR_TIE`);
* :mod:`~specchat.race.replay` - the two runs replayed by an injected clock (:class:`RaceReplay`, :func:`play`).

The names below are the package's public API; import them from here.
"""

from specchat.race.record import (
    LANE_A,
    LANE_B,
    LANES,
    LOCAL_LABELS,
    Lane,
    RaceCancelled,
    RaceResult,
    RaceRun,
    TimedPiece,
    record_race,
    record_server_race,
    server_label,
)
from specchat.race.replay import RaceReplay, ReplayEvent, play, timeline
from specchat.race.verdict import NEAR_TIE, SERVER_TOP_N, local_difference, server_difference

__all__ = [
    "LANES", "LANE_A", "LANE_B", "LOCAL_LABELS", "NEAR_TIE", "SERVER_TOP_N", "Lane", "RaceCancelled", "RaceReplay",
    "RaceResult", "RaceRun", "ReplayEvent", "TimedPiece", "local_difference", "play", "record_race", "record_server_race",
    "server_difference", "server_label", "timeline",
]
