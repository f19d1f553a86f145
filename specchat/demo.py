"""The tour of "helps" and "hurts": scripted scenes on the offline models, as data, and a headless runner.

A :class:`Scene` is one lesson: a (target, drafter) :class:`Pair`, a fixed K or auto-K, the prompt and its
length, the one sentence shown on screen and what the user should see. :data:`SCENES` is the tour:

1. n-gram on a copy-heavy edit - **helps** (the reply copies the prompt; drafts are free and accepted);
2. n-gram on free prose - **neutral** (nothing to copy: the drafter mostly stays quiet);
3. the bundled model drafting for itself, fixed K - acceptance ~100 % **yet slower** (a draft that costs as
   much as the target cannot pay, however right it is);
4. a layer-skip self-draft, fixed K - **ghosts everywhere** (cheap but mostly wrong: low acceptance);
5. then auto-K choosing for each of those pairs (it keeps n-gram on for the copy, turns the costly drafts off
   and says why);
6. the suffix drafter when the model has answered this kind of question before - **helps** (earlier
   conversations of the same kind of task are saved first, in the tour's own history, and the reply copies the
   model's own earlier answers: :data:`HISTORY_PAIR`, :func:`load_scene`);
7. the first of those questions asked again, auto-K - **helps** most: its saved answer is copied from the reply's
   first token (:meth:`specchat.engine.suffix.SuffixIndex.reply_after`; on an AMD EPYC Zen 4's F16, the bench family's
   question asked again read 3.15x plain decoding with auto-K, where a new question of the same kind reads ~1.1x).

Model drafters run with a fixed K in scenes 3-4 so their colours show (auto-K would switch them off at once).
The "helps" pair is one constant, :data:`HELPS_PAIR`: the preset ``smollm2-q8-ngram``, the bundled model
re-encoded in Q8_0 (the same weights, with a batched verify kernel: :mod:`specchat.engine.kernels`) drafted by
n-gram lookup - until this machine's pick replaces it (:func:`choose_helps_pair`: a saved tune's copy-heavy
choice, else the file whose measured verify cost predicts the fastest copy), in the history scene too (the same
file, the suffix drafter: :func:`scenes_for`).

:func:`run_tour` plays scenes headless (``specchat demo --headless``): each scene is a race
(:func:`specchat.race.record_race`: the same prompt with speculation off, then on), so every scene reports
both speeds, the ratio, the acceptance and the ghosts, and that the texts are identical. The demo pairs that
are derived from the bundled model are derived first if missing (:func:`ensure_pairs`, with progress). The
app's tour screen (:mod:`specchat.tui.screens.tour`) plays the same scenes through the same functions.

What touches llama.cpp - deriving the demo files and loading a pair - is passed in (``derive``, ``load``:
:func:`specchat.models.derive.derive_demo` and :func:`specchat.loading.load_engine`, given by the commands),
never imported here, so the TUI can import the scenes while it never imports llama_cpp (the import contract in
``pyproject.toml``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specchat.bench.history_suite import bench_settings, earlier_tasks, seed_history, task, wait_for_index
from specchat.bench.suite import DEFAULT_SUITE
from specchat.engine.drafter_kinds import NGRAM, SUFFIX
from specchat.errors import ModelFileError, UserError
from specchat.models.presets import PRESET_PREFIX, SMOLLM2_F16_FILE
from specchat.models.registry import models_dir, resolve_pair
from specchat.race import RaceResult, record_race

Progress = Callable[[str], None]
#: writes the demo files into a models directory (:func:`specchat.models.derive.derive_demo`'s signature):
#: ``derive(models_dir, threads=..., progress=...)`` -> (path, derived or None when it was there already)
Derive = Callable[..., Iterable[tuple[Path, Any]]]


@dataclass(frozen=True, slots=True)
class Pair:
    """A target and a drafter as the settings name them (``target``, ``draft``; see :mod:`specchat.models.registry`),
    and any other settings the pair runs with (``extra``: e.g. ``(("flash_attn", "off"),)``, as tune measured it)."""

    target: str
    draft: str
    label: str
    extra: tuple[tuple[str, Any], ...] = ()

    def settings_update(self) -> dict[str, Any]:
        """What a scene sets on the app's settings to run this pair."""
        return {"target": self.target, "draft": self.draft, **dict(self.extra)}


def _suite_prompt(name: str) -> str:
    return next(p["prompt"] for p in DEFAULT_SUITE if p["name"] == name)


#: the pair of the "helps" scenes: the bundled model's Q8_0 re-encoding + n-gram drafting (``preset:smollm2-q8-ngram``,
#: derived by ``specchat models derive --demo``). The bundled Q4_1 has no batched verify kernel, so n-gram on it
#: tops out near 1.2-1.4x; the Q8_0 file verifies a batch far cheaper (README, "The lesson", has the v(K) table)
HELPS_PAIR = Pair(f"{PRESET_PREFIX}smollm2-q8-ngram", NGRAM, "SmolLM2 Q8_0 + n-gram")
#: the bundled model drafting for itself: every draft accepted, each costing a whole target decode
SELF_DRAFT_PAIR = Pair("bundled", "bundled", "bundled SmolLM2 drafting for itself")
#: a layer-skip self-draft (12 of 30 blocks of the bundled model, ``specchat models derive --demo``)
LAYER_SKIP_PAIR = Pair("preset:smollm2-layerskip", NGRAM, "bundled SmolLM2 + its layer-skip draft")
#: the history scene's pair: the "helps" target file (the Q8_0 re-encoding, whose batched verify lets long copies pay;
#: this machine's pick replaces it as it does :data:`HELPS_PAIR`, :func:`history_pair`) drafted by the suffix drafter,
#: over the tour's own history (:func:`load_scene`)
HISTORY_PAIR = Pair(f"{PRESET_PREFIX}smollm2-q8-ngram", SUFFIX, "SmolLM2 Q8_0 + suffix")
#: the earlier conversations the history scene saves first: few enough to be answered in seconds here (the bench's
#: ``--suite history`` saves 20), the same kind of task as the scene's
HISTORY_EARLIER = 6
#: the tour's own data dir for the history scene, under the data dir (never the user's history database)
TOUR_HISTORY_DIR = "tour-history"

COPY_PROMPT = _suite_prompt("copy-heavy")
PROSE_PROMPT = _suite_prompt("prose")
PLAIN_PROMPT = "Explain in a few sentences why the sky is blue."


@dataclass(frozen=True, slots=True)
class Scene:
    """One scene of the tour. ``k`` = a fixed K, or None for auto-K. ``expected``: the verdicts
    (:func:`verdict`) its ``expect`` sentence agrees with; a measured verdict outside them is told with the
    arithmetic instead (:func:`outcome_line`), never under a sentence it contradicts."""

    name: str
    pair: Pair
    k: int | None
    prompt: str
    n_predict: int
    sentence: str  # the one sentence on screen
    expect: str  # what the user should see
    tags: tuple[str, ...] = field(default=())
    expected: tuple[str, ...] = ("helps", "neutral", "hurts")
    #: tasks answered (greedy, plain) and saved in the tour's own history before the scene runs (:func:`load_scene`)
    earlier: tuple[str, ...] = ()

    @property
    def mode(self) -> str:
        return "auto-K" if self.k is None else f"K {self.k}"


SCENES: tuple[Scene, ...] = (
    Scene(
        "n-gram on a copy-heavy edit", HELPS_PAIR, 16, COPY_PROMPT, 160,
        "The reply copies the code it was given, so n-gram lookup drafts long runs for free and the target "
        "accepts them in one batch.",
        "long green runs of accepted drafts; faster than without speculation", ("helps",), ("helps",),
    ),
    Scene(
        "n-gram on free prose", HELPS_PAIR, 16, PROSE_PROMPT, 128,
        "A new story has nothing to copy: the n-gram drafter mostly finds no match and stays quiet.",
        "mostly plain tokens, a few short drafts; about the speed of no speculation", ("neutral",), ("neutral",),
    ),
    Scene(
        "a draft as costly as the target", SELF_DRAFT_PAIR, 4, PLAIN_PROMPT, 96,
        "The model drafting for itself is always right, but each draft token costs a whole target decode: "
        "acceptance near 100 % and still slower.",
        "almost everything accepted (green), yet fewer tokens per second than without speculation", ("hurts",),
        ("hurts",),
    ),
    Scene(
        "a cheap draft that guesses badly", LAYER_SKIP_PAIR, 4, PLAIN_PROMPT, 96,
        "A layer-skip draft keeps 12 of the 30 blocks: cheap, but most of its guesses are wrong and are thrown "
        "away.",
        "ghost text (rejected drafts) everywhere, few accepted tokens; slower", ("hurts",), ("hurts",),
    ),
    Scene(
        "auto-K on the copy-heavy edit", HELPS_PAIR, None, COPY_PROMPT, 160,
        "Auto-K measures what drafting costs and gains, and keeps n-gram drafting on where the reply copies.",
        "drafting stays on; the sidebar's K follows the copies", ("auto-K", "helps"), ("helps",),
    ),
    Scene(
        "auto-K on free prose", HELPS_PAIR, None, PROSE_PROMPT, 128,
        "On prose auto-K lets the n-gram drafter propose only what it trusts, and turns drafting off when "
        "nothing pays.",
        "few drafts; about the speed of no speculation", ("auto-K", "neutral"), ("neutral",),
    ),
    Scene(
        "auto-K with the costly draft", SELF_DRAFT_PAIR, None, PLAIN_PROMPT, 96,
        "Auto-K times the draft before the first round and does not draft: it says why in one line.",
        "a notice that drafting is off for cost; plain tokens at plain speed", ("auto-K", "hurts"), ("neutral",),
    ),
    Scene(
        "auto-K with the layer-skip draft", LAYER_SKIP_PAIR, None, PLAIN_PROMPT, 96,
        "Auto-K sees the layer-skip draft's cost and low acceptance and turns drafting off, probing now and then.",
        "a notice that drafting is off; plain speed instead of a slowdown", ("auto-K", "hurts"), ("neutral",),
    ),
    Scene(
        "the model has answered this kind of question before", HISTORY_PAIR, 16, task(24), 128,
        f"{HISTORY_EARLIER} earlier conversations asked for the same kind of function: the suffix drafter copies the "
        "model's own earlier answers from the history, and the target accepts them in long runs.",
        "long green runs copied from earlier conversations; faster than without speculation", ("helps", "history"),
        ("helps",), tuple(earlier_tasks(HISTORY_EARLIER)),
    ),
    Scene(
        "the same question asked again", HISTORY_PAIR, None, task(0), 128,
        "Asked again, its answer is in the history whole: suffix copies it from the reply's first token.",
        "nearly every token a green draft copied from the earlier answer; far faster than without speculation",
        ("helps", "history", "auto-K"), ("helps",), tuple(earlier_tasks(HISTORY_EARLIER)),
    ),
)


#: the acceptance the helps pick assumes for the copy-heavy scene: what the bench measured n-gram drafting at on
#: the copy-heavy prompt (0.93-0.98 over K 8-64, on the Xeon and the AMD EPYC Zen 4 alike: acceptance is the
#: text's, not the CPU's)
COPY_ALPHA = 0.95


def scenes_for(helps: Pair, scenes: Sequence[Scene] = SCENES) -> tuple[Scene, ...]:
    """``scenes`` with :data:`HELPS_PAIR` replaced by ``helps`` (this machine's pick, :func:`pick_helps_pair`), and
    :data:`HISTORY_PAIR`'s target by the same file and settings (:func:`history_pair`): the history scene copies too,
    so the file whose verify batch is cheapest here is its file as well. With the Q8_0 file fixed, the scene read
    0.79x on an AMD EPYC Zen 4 (v(6) = 4.7 single rows there), where the pick, F16, read 1.25x on the copy."""
    history = history_pair(helps)
    return tuple(
        replace(s, pair=helps) if s.pair == HELPS_PAIR else replace(s, pair=history) if s.pair == HISTORY_PAIR else s
        for s in scenes
    )


def uses_helps_file(scenes: Sequence[Scene]) -> bool:
    """Whether any of ``scenes`` runs on the helps file (:data:`HELPS_PAIR`, or :data:`HISTORY_PAIR` with the suffix
    drafter): then this machine's pick is worth making first (:func:`choose_helps_pair`)."""
    return any(s.pair in (HELPS_PAIR, HISTORY_PAIR) for s in scenes)


def history_pair(helps: Pair) -> Pair:
    """The history scene's pair for the helps pair ``helps``: its target file and settings, drafted by the suffix
    drafter (:data:`HISTORY_PAIR` for :data:`HELPS_PAIR`)."""
    if helps == HELPS_PAIR:
        return HISTORY_PAIR
    return Pair(helps.target, SUFFIX, helps.label.replace("n-gram", "suffix"), helps.extra)


def tuned_helps_pair(tuned: Iterable[Any], source_file: str) -> Pair | None:
    """The helps pair from a saved ``specchat models tune`` result of ``source_file`` (the bundled model): its
    copy-heavy choice, with n-gram drafting and the flash-attention and repack settings tune measured it with.
    None when no result is saved for that file, or its choice is a file that is gone."""
    for result in tuned:
        if result.source != source_file:
            continue
        choice = next((c for c in result.choices if c.workload == "copy-heavy"), None)
        if choice is None:
            continue
        variant = next((v for v in result.variants if v.label == choice.label), None)
        if variant is None or not Path(variant.path).is_file():
            continue
        extra = (("flash_attn", variant.flash_attn),) if variant.flash_attn not in ("", "auto") else ()
        # the kernels it was measured with: "auto" was llama.cpp's default (tune loads it as "on"), which the app's
        # own "auto" would not keep where a tune measured the file faster without them on plain chat
        extra += (("repack", "on" if variant.repack == "auto" else variant.repack),)
        return Pair(variant.path, NGRAM, f"SmolLM2 {choice.label} + n-gram", extra)
    return None


def predicted_copy_tok_s(t1_ms: float, v_by_k: Sequence[float], alpha: float = COPY_ALPHA) -> float:
    """Tokens per second of n-gram drafting on a copy at acceptance ``alpha``: the best over K of
    E(α, K) / v(K) (Leviathan et al. 2023, a free drafter: c = 0) times the one-row speed 1000 / t1."""
    best = max((1.0 - alpha ** (k + 1)) / (1.0 - alpha) / v for k, v in enumerate(v_by_k) if v > 0)
    return best * 1000.0 / t1_ms


def pick_helps_pair(candidates: Sequence[Pair], measure: Callable[[Pair], tuple[float, Sequence[float]]],
                    progress: Progress | None = None) -> tuple[Pair, str]:
    """The candidate with the fastest predicted copy (:func:`predicted_copy_tok_s`) from ``measure(pair)`` =
    (t1 ms, v by K), the engine's calibration of that file on this CPU (cached per file: measured once); and one
    line saying why."""
    say = progress or (lambda _msg: None)
    rates: list[tuple[float, Pair]] = []
    for pair in candidates:
        say(f"timing the verify cost of {pair.label} (once per file on this CPU)")
        t1, v = measure(pair)
        rates.append((predicted_copy_tok_s(t1, v), pair))
    rate, pair = max(rates, key=lambda rp: rp[0])
    others = ", ".join(f"{p.label} {r:.0f}" for r, p in rates if p != pair)
    return pair, f"helps scenes on {pair.label}: predicted {rate:.0f} tok/s on a copy here ({others})"


def helps_candidates(data_dir: Any) -> list[Pair]:
    """The pairs the helps scenes may use, all from the bundled model's weights with n-gram drafting: its Q8_0
    and F16 re-encodings (derived with the demo files) and the bundled Q4_1 itself."""
    mdir = models_dir(data_dir)
    f16 = [Pair(str(mdir / SMOLLM2_F16_FILE), NGRAM, "SmolLM2 F16 + n-gram")] if mdir is not None else []
    return [HELPS_PAIR, *f16, Pair("bundled", NGRAM, "bundled SmolLM2 Q4_1 + n-gram")]


def choose_helps_pair(data_dir: Any, tuned: Iterable[Any], source_file: str,
                      measure: Callable[[Pair], tuple[float, Sequence[float]]] | None,
                      progress: Progress | None = None) -> tuple[Pair, str]:
    """This machine's helps pair: a saved tune result's copy-heavy choice (:func:`tuned_helps_pair`), else the
    candidates' measured verify costs (:func:`pick_helps_pair`), else :data:`HELPS_PAIR` (nothing to measure
    with). Returns the pair and one line saying where it came from."""
    pair = tuned_helps_pair(tuned, source_file)
    if pair is not None:
        return pair, f"helps scenes on {pair.label}: this CPU's copy-heavy pick ('specchat models tune')"
    if measure is None:
        return HELPS_PAIR, f"helps scenes on {HELPS_PAIR.label} (no tune result on this machine)"
    return pick_helps_pair(helps_candidates(data_dir), measure, progress)


def load_scene(scene: Scene, settings: Any, load: Callable[[Any], Any], progress: Progress | None = None,
               n_predict: int | None = None, cancelled: Callable[[], bool] = lambda: False) -> Any:
    """The session a scene races on: its pair loaded with ``load``; a scene with :attr:`Scene.earlier` tasks runs in
    the tour's own data dir (``<data dir>/tour-history``, its models found in the data dir as usual), whose history
    holds the model's greedy answers to them - saved the first time (:func:`specchat.bench.history_suite.seed_history`)
    and kept, with the list of tasks they answer, for the next tour; each answer as long as the scene's replies
    (``n_predict``, else the scene's own).

    The list (``earlier.txt``) is written only once every answer is saved: a save cut short - ``cancelled()`` saying
    yes (:class:`~specchat.race.RaceCancelled`, within one round), Ctrl-C, an error, the process killed - leaves
    none, so the next call wipes the directory and saves them afresh; the session is closed, never returned."""
    update = {**scene.pair.settings_update(), "server_url": None}
    if not scene.earlier:
        return load(settings.model_copy(update=update))
    own = Path(settings.effective_data_dir()) / TOUR_HISTORY_DIR
    marker = own / "earlier.txt"
    wanted = "\n".join(scene.earlier)
    if not marker.is_file() or marker.read_text(encoding="utf-8") != wanted:
        import shutil

        shutil.rmtree(own, ignore_errors=True)  # another list of tasks, or a save cut short: start again
    own.mkdir(parents=True, exist_ok=True)
    session = load(bench_settings(settings.model_copy(update=update), own))
    if not marker.is_file():
        say = progress or (lambda _msg: None)
        session.n_predict = n_predict or scene.n_predict
        try:
            seed_history(session, own / "history.sqlite3", list(scene.earlier),
                         lambda i, n, what: say(f"{what} (once: the history scene's own history)"), cancelled)
        except BaseException:
            session.close()
            raise
        marker.write_text(wanted, encoding="utf-8")
    else:
        wait_for_index(session)  # the saved index loaded before the scene's race drafts from it
    return session


def pairs(scenes: Sequence[Scene] = SCENES) -> list[Pair]:
    """The distinct pairs of ``scenes``, in order."""
    out: list[Pair] = []
    for s in scenes:
        if s.pair not in out:
            out.append(s.pair)
    return out


def missing_pairs(scenes: Sequence[Scene], data_dir: Any) -> list[Pair]:
    """The scenes' pairs whose files are not there (yet)."""
    missing = []
    for pair in pairs(scenes):
        try:
            resolve_pair(pair.target, pair.draft, data_dir)
        except ModelFileError:
            missing.append(pair)
    return missing


def ensure_pairs(
    scenes: Sequence[Scene], data_dir: Any, *, derive: Derive, threads: int = 1, progress: Progress | None = None
) -> list[str]:
    """Derive the demo files the scenes' pairs need if they are missing (``derive``: ``specchat models derive
    --demo``'s machinery, with ``progress``); returns the paths written. A pair that still does not resolve
    afterwards (e.g. a hub preset not downloaded) is a :class:`UserError` naming what to run."""

    say = progress or (lambda _msg: None)
    written: list[str] = []
    missing = missing_pairs(scenes, data_dir)
    if missing:
        mdir = models_dir(data_dir)
        if mdir is None:
            raise UserError("the demo pairs need a data directory to derive into; give --data-dir")
        say(f"deriving the demo models into {mdir} (once; a few seconds each)")
        for path, derived in derive(mdir, threads=threads, progress=say):
            if derived is not None:
                written.append(str(path))
        for pair in missing:
            resolve_pair(pair.target, pair.draft, data_dir)  # still missing: its error says what to run
    return written


def verdict(ratio: float | None) -> str:
    """``helps`` (≥ 1.05×), ``hurts`` (≤ 0.95×) or ``neutral``, from a measured ratio."""
    if ratio is None:
        return "-"
    return "helps" if ratio >= 1.05 else "hurts" if ratio <= 0.95 else "neutral"


def verdict_verb(v: str) -> str:
    """The verdict ``v`` as a sentence's verb: "it helps", "it hurts", "it is neutral"."""
    return f"it {v}" if v in ("helps", "hurts") else f"it is {v}"


@dataclass(frozen=True, slots=True)
class SceneResult:
    scene: Scene
    race: RaceResult

    @property
    def ghosts(self) -> int:
        """Rejected draft tokens shown as ghost text in the speculative run."""
        return sum(1 for p in self.race.on.pieces if p.kind == "rejected")

    def figures(self) -> dict[str, Any]:
        on, off = self.race.on, self.race.off
        t = on.turn
        status = on.last_step.status if on.last_step is not None else None
        return {
            "scene": self.scene.name, "pair": self.scene.pair.label, "target": self.race.target,
            "drafter": self.race.drafter, "mode": self.scene.mode, "tokens": t.predicted_n,
            "tok_s_off": off.tok_s, "tok_s_on": on.tok_s, "ratio": self.race.ratio, "verdict": verdict(self.race.ratio),
            "acceptance": t.acceptance, "mean_len": t.mean_len, "drafted": t.draft_n, "drafting_rounds": t.n_spec_steps,
            "rounds": t.n_steps, "ghosts": self.ghosts, "k_used": [t.k_min, t.k_max],
            "k_status": status.label if status is not None else None, "notices": list(on.notices),
            "identical": self.race.identical, "difference": self.race.difference or None,
            "sentence": self.scene.sentence, "expect": self.scene.expect,
            "history_drafts": t.accepted_by_origin.get("history", 0),
        }


def run_tour(
    settings: Any,
    scenes: Sequence[Scene] = SCENES,
    *,
    load: Callable[[Any], Any],
    derive: Derive,
    n_predict: int | None = None,
    progress: Progress | None = None,
    pick: Callable[[Any, Progress], tuple[Pair, str]] | None = None,
) -> list[SceneResult]:
    """Play ``scenes`` headless, one race each (speculation off, then on), and return their results.

    ``settings``: a :class:`specchat.config.Settings` (threads, n_ctx, data dir ...; target and draft are the
    scenes'); ``n_predict`` overrides every scene's length (a short CI run); ``load`` builds an engine from
    settings (:func:`specchat.loading.load_engine`), ``derive`` writes missing demo files (:func:`ensure_pairs`),
    ``pick(settings, progress)`` chooses this machine's helps pair once the files are there
    (:func:`choose_helps_pair`; None: :data:`HELPS_PAIR`). Each pair is loaded once.
    """
    say = progress or (lambda _msg: None)
    data_dir = settings.effective_data_dir() if hasattr(settings, "effective_data_dir") else None
    ensure_pairs(scenes, data_dir, derive=derive, threads=settings.threads, progress=say)
    if pick is not None and uses_helps_file(scenes):
        helps, why = pick(settings, say)
        say(why)
        scenes = scenes_for(helps, scenes)
    sessions: dict[Pair, Any] = {}
    results: list[SceneResult] = []
    try:
        for i, scene in enumerate(scenes, start=1):
            session = sessions.get(scene.pair)
            if session is None:
                say(f"loading {scene.pair.label}")
                session = load_scene(scene, settings, load, say, n_predict)
                sessions[scene.pair] = session
            session.n_predict = n_predict or scene.n_predict
            say(f"scene {i}/{len(scenes)}: {scene.name} ({scene.mode})")
            results.append(SceneResult(scene, record_race(session, scene.prompt, k=scene.k)))
    finally:
        for session in sessions.values():
            session.close()
    return results


def outcome_line(result: SceneResult) -> str:
    """The scene's "expected" sentence when its measured verdict agrees with it, else what this CPU measured
    and why, in the exchange rate's terms: the tokens a drafting round emitted (those it kept and the target's own)
    against what it cost in single-row decodes - as the runs measured it (:func:`drafting_round_cost`), so the
    sentence can never contradict the verdict - and the price the cost model had put on it (c·K for the draft plus
    v(K) for the verify, its last figures). The price alone once read "kept 4.0 for a round costing 3.8 ... does not
    pay" under a measured 0.93x (SmolLM2 F16 + suffix on an AMD EPYC Zen 4): v at the mean draft length is not the
    mean cost, and a lookup in every round is a cost too."""
    scene, race = result.scene, result.race
    v = verdict(race.ratio)
    if v in scene.expected or race.ratio is None:
        return f"expected: {scene.expect}{_history_measured(result)}"
    t = race.on.turn
    step = race.on.last_step
    ratio = f"{race.ratio:.2f}×"
    spent = drafting_round_cost(race.off.turn, t)
    if step is None or step.cost is None or not t.n_spec_steps or spent is None:
        return f"on this CPU {verdict_verb(v)} ({ratio}) by the verdict's bar, with no round drafting: that difference is the runs' noise"
    cost = step.cost
    drafted = t.draft_n / t.n_spec_steps  # tokens drafted per drafting round
    d = max(1, round(drafted))
    priced = cost.c * drafted + (cost.verify.at(d) if cost.verify is not None else cost.v)
    what = "helps" if spent < t.mean_len else "does not pay"
    return (f"on this CPU {verdict_verb(v)} ({ratio}): a drafting round emitted {t.mean_len:.1f} tokens for "
            f"{spent:.1f} single-row decodes (measured; priced {priced:.1f}: v({d}) {priced - cost.c * drafted:.1f} + "
            f"c {cost.c:.2f} × {drafted:.1f} drafted), so drafting {what}: it pays only while the tokens emitted "
            f"exceed the round's cost")


def drafting_round_cost(off: Any, on: Any) -> float | None:
    """What one drafting round of the run ``on`` cost, in single-row decodes of the run ``off`` (the same reply
    without speculation, ``Turn``): the on-run's time minus its plain rounds at the off-run's time per token, over
    its drafting rounds - everything drafting added (lookups in rounds that found nothing included). None without
    a drafting round or a timed off-run. Below the rounds' mean length (tokens emitted per drafting round), the
    on-run is faster than the off-run, and above it slower: the verdict's own arithmetic."""
    if not on.n_spec_steps or not off.predicted_n or not off.predicted_ms:
        return None
    t1 = off.predicted_ms / off.predicted_n
    plain_rounds = on.n_steps - on.n_spec_steps
    return (on.predicted_ms - plain_rounds * t1) / t1 / on.n_spec_steps


def _history_measured(result: SceneResult) -> str:
    """For a scene over a history: what this CPU measured and how much of the reply the history drafted."""
    if not result.scene.earlier:
        return ""
    t, ratio = result.race.on.turn, result.race.ratio
    kept = t.accepted_by_origin.get("history", 0)
    speed = f"{ratio:.2f}\u00d7" if ratio is not None else "no ratio"
    return (f"; on this CPU {speed} ({verdict(ratio)}): {kept} of its {t.predicted_n} tokens were drafts copied from "
            f"{len(t.history_conversations)} earlier conversation(s)")


def format_results(results: Sequence[SceneResult]) -> str:
    """The tour's figures, one block per scene (what ``specchat demo --headless`` prints)."""
    lines = []
    for i, r in enumerate(results, start=1):
        f = r.figures()
        acc = "–" if f["acceptance"] is None else f"{f['acceptance'] * 100:.0f} %"
        ratio = "–" if f["ratio"] is None else f"{f['ratio']:.2f}×"
        lines += [
            f"{i}. {f['scene']} — {f['pair']}, {f['mode']}",
            f"   {r.scene.sentence}",
            f"   off {f['tok_s_off']:.1f} tok/s, on {f['tok_s_on']:.1f} tok/s: {ratio} ({f['verdict']}); "
            f"{f['tokens']} tokens, drafted {f['drafted']} in {f['drafting_rounds']} of {f['rounds']} rounds, "
            f"acceptance {acc}, mean len {f['mean_len']:.2f}, ghosts {f['ghosts']}",
        ]
        if f["k_status"]:
            lines.append(f"   {f['k_status']}")
        lines += [f"   {n}" for n in f["notices"]]
        lines.append("   texts identical" if f["identical"] else f"   texts differ: {f['difference']}")
        lines.append(f"   {outcome_line(r)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


__all__ = [
    "COPY_ALPHA", "HELPS_PAIR", "HISTORY_PAIR", "drafting_round_cost", "history_pair", "load_scene", "choose_helps_pair", "helps_candidates", "LAYER_SKIP_PAIR", "SCENES", "SELF_DRAFT_PAIR", "Derive", "Pair", "Scene",
    "SceneResult", "ensure_pairs", "format_results", "missing_pairs", "outcome_line", "pairs", "pick_helps_pair",
    "predicted_copy_tok_s", "run_tour", "scenes_for", "tuned_helps_pair", "uses_helps_file", "verdict", "verdict_verb",
]
