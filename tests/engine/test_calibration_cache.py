"""The verify-cost calibration cache: its key (file, threads, kernels, CPU, llama.cpp), what invalidates an
entry, and the engine starting warm from it (no timing, v(K) known before the first turn)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from enginekit import N_BATCH, build_decoder, run_turn
from specchat.engine.calibration import CALIBRATION_ROWS
from specchat.engine.calibration_cache import CalibrationCache, CalibrationKey, cpu_identity, depth_bucket
from specchat.engine.chat import ChatSession
from specchat.engine.events import Calibrating, PromptDone
from specchat.engine.model import Model
from specchat.engine.speculative import SpeculativeDecoder

from tinymodels import GREEDY_PROMPTS

TIMINGS = [(1, 10.0), (3, 20.0), (5, 28.0), (1, 11.0), (3, 21.0), (5, 29.0)]


def _key(path: Path, **kw) -> CalibrationKey:
    st = path.stat()
    base = dict(path=str(path.resolve()), size=st.st_size, mtime_ns=st.st_mtime_ns, threads=1, threads_batch=1,
                repack=False, row_by_row=False, flash_attn="off", cpu=cpu_identity(), llama="llama-cpp-python 0.3.36; AVX512 = 1")
    base.update(kw)
    return CalibrationKey(**base)


def test_an_entry_is_read_back_only_under_exactly_its_key(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    cache = CalibrationCache(tmp_path / "calibration")
    key = _key(f)
    assert cache.load(key) is None
    assert cache.save(key, TIMINGS, "Q4_1") is not None
    entry = cache.load(key)
    assert entry is not None and entry.timings == tuple(TIMINGS) and entry.weights == "Q4_1" and entry.file_is_current()
    for change in ({"threads": 2}, {"threads_batch": 2}, {"repack": True}, {"row_by_row": True}, {"flash_attn": "on"},
                   {"cpu": "another CPU (flags 000000000000)"}, {"llama": "llama-cpp-python 0.3.37; AVX512 = 1"},
                   {"depth": 256}):
        assert cache.load(dataclasses.replace(key, **change)) is None, change
    assert [e.key for e in cache.for_file(f)] == [key]


def test_a_changed_file_invalidates_its_entry(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    cache = CalibrationCache(tmp_path / "calibration")
    cache.save(_key(f), TIMINGS, "Q4_1")
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # rewritten in place: a new mtime
    assert cache.load(_key(f)) is None and cache.for_file(f) == []
    f.write_bytes(b"GGUF" + b"\0" * 61)  # another size
    assert cache.load(_key(f)) is None
    moved = tmp_path / "other.gguf"
    f.rename(moved)
    assert cache.for_file(moved) == []  # the path is part of the identity


def test_unreadable_entries_count_as_absent_and_a_failed_write_loses_nothing(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    cache = CalibrationCache(tmp_path / "calibration")
    key = _key(f)
    path = cache.save(key, TIMINGS, "Q4_1")
    for junk in ("{not json", '{"version": 99}', '{"version": 1, "key": {}, "timings": []}'):
        path.write_text(junk)
        assert cache.load(key) is None and cache.entries() == []
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    assert CalibrationCache(blocked / "calibration").save(key, TIMINGS, "Q4_1") is None


def _cached_decoder(target: Path, cache: CalibrationCache, threads: int = 1) -> SpeculativeDecoder:
    return build_decoder(target, None, drafter="ngram", threads=threads, calibration_cache=cache)


def test_the_engine_times_v_once_per_file_and_threads_and_starts_warm_after(tiny_target, tmp_path, monkeypatch):
    """First session on a file: v(K) is timed after the prompt and stored. A later session (a fresh Model of the
    same file and threads) replays it at construction - EngineInfo already carries the measured curve - and
    times no verify batch; touching the file, or other threads, means timing again."""
    target = tmp_path / "t.gguf"
    target.symlink_to(tiny_target)
    cache = CalibrationCache(tmp_path / "calibration")
    timed: list[int] = []
    real = Model.time_scratch_decode

    def recording(self, tokens):
        timed.append(len(tokens))
        return real(self, tokens)

    monkeypatch.setattr(Model, "time_scratch_decode", recording)

    def one_turn(threads: int = 1) -> tuple[SpeculativeDecoder, list[int]]:
        timed.clear()
        dec = _cached_decoder(target, cache, threads)
        dec.controls.set_auto_k(True)
        session = ChatSession(dec, n_predict=6)
        before = session.info().verify
        list(session.send(GREEDY_PROMPTS[0]))
        return dec, [before.source, dec.verify.source, sorted(set(timed))]

    dec, (before, after, rows) = one_turn()
    assert (before, after) == ("prior", "measured") and set(CALIBRATION_ROWS) <= set(rows)
    assert len(cache.entries()) == 1 and cache.entries()[0].weights == "F32"
    dec.close()

    dec, (before, after, rows) = one_turn()
    assert (before, after) == ("cache", "cache") and max(rows, default=0) <= 1, rows
    assert dec.verify.measured_rows == CALIBRATION_ROWS[-1] and dec.verify.reason.startswith("F32: ")
    dec.close()

    dec, (before, _after, rows) = one_turn(threads=2)  # another thread count: another key
    assert before == "prior" and set(CALIBRATION_ROWS) <= set(rows)
    dec.close()

    st = tiny_target.stat()
    os.utime(tiny_target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    try:
        dec, (before, _after, rows) = one_turn()
        assert before == "prior" and set(CALIBRATION_ROWS) <= set(rows)
        dec.close()
    finally:
        os.utime(tiny_target, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_loader_keeps_the_cache_in_the_data_dir(tiny_target, tmp_path):
    from specchat.config import Settings
    from specchat.loading import load_engine

    settings = Settings(target=str(tiny_target), draft="ngram", threads=1, n_ctx=256, n_predict=4, data_dir=tmp_path)
    first = load_engine(settings, auto_k=True)
    try:
        list(first.send(GREEDY_PROMPTS[0]))
        assert first.decoder.verify.source == "measured"
    finally:
        first.close()
    assert len(CalibrationCache(tmp_path / "calibration").entries()) == 1
    second = load_engine(settings, auto_k=True)
    try:
        info = second.info()
        assert info.verify is not None and info.verify.source == "cache" and info.verify.v[0] == 1.0
        assert len(info.verify.v) == info.k_max + 1
    finally:
        second.close()


def test_a_cached_curve_and_a_fresh_one_predict_the_same(tiny_target, tmp_path):
    """Replaying stored timings gives the cost model exactly what timing them gave it."""
    from specchat.engine.calibration import calibrate_verify_cost, replay_timings
    from specchat.engine.telemetry import CostModel

    m = Model(tiny_target, n_ctx=256, n_batch=N_BATCH, threads=1)
    try:
        ctx = m.tokenize(GREEDY_PROMPTS[0], add_bos=True)
        m.decode(ctx, logits_last=0)
        fresh = CostModel()
        timings = calibrate_verify_cost(m, fresh, ctx[-1])
        replayed = CostModel()
        replay_timings(replayed, timings)
        assert [replayed.v(k) for k in range(65)] == pytest.approx([fresh.v(k) for k in range(65)])
        assert replayed.target_ms() == pytest.approx(fresh.target_ms())
    finally:
        m.close()


def test_run_turn_with_a_cache_is_exact(tiny_target, tmp_path):
    cache = CalibrationCache(tmp_path / "calibration")
    dec = _cached_decoder(tiny_target, cache)
    try:
        ctx = dec.target.tokenize(GREEDY_PROMPTS[2], add_bos=True)
        dec.controls.set_speculative(False)
        plain, _ = run_turn(dec, ctx, 30)
        dec.reset()
        dec.controls.set_speculative(True)
        dec.controls.set_auto_k(True)
        spec, _ = run_turn(dec, ctx, 30, seed=1)
        assert spec.tokens == plain.tokens
        assert np.isfinite(dec.verify.target_ms)
    finally:
        dec.close()


def test_the_flash_attention_setting_reaches_llama_cpp_and_keys_the_calibration(tiny_target, tmp_path):
    """``flash_attn`` (default auto) is what the loaded target runs with, and a calibration timed with one
    setting is never read for the other (on this CPU it changes v(16) several-fold)."""
    from specchat.config import Settings
    from specchat.loading import load_engine

    infos = {}
    for setting in ("off", "on", "auto"):
        kw = {} if setting == "auto" else {"flash_attn": setting}
        session = load_engine(Settings(target=str(tiny_target), draft="ngram", n_ctx=256, threads=1, data_dir=tmp_path, **kw))
        try:
            target = session.decoder.target
            assert target.flash_attn == setting
            infos[setting] = CalibrationKey.for_model(target)
            assert [t for t in session.send(GREEDY_PROMPTS[0])]  # decodes with it
        finally:
            session.close()
    assert len({k.digest() for k in infos.values()}) == 3


def _verbose_log(capsys, monkeypatch, work):
    """``work()``'s result and llama.cpp's own log meanwhile (specchat.engine.llamalog drops the log unless
    verbose: verbose for this call, captured)."""
    from specchat.engine import llamalog

    monkeypatch.setattr(llamalog, "_verbose", True)
    capsys.readouterr()
    try:
        result = work()
    finally:
        monkeypatch.setattr(llamalog, "_verbose", False)
    return result, capsys.readouterr().err


@pytest.mark.slow
def test_llama_cpp_runs_with_the_flash_attention_setting_it_was_given(bundled_model, capsys, monkeypatch):
    """Not the attribute set from the argument: llama.cpp's own account of the context it made (its log line
    ``flash_attn = enabled / disabled / auto``, and whether the graph it decodes with holds the fused
    ``FLASH_ATTN_EXT`` node), and a behaviour that differs with the kernel: on the bundled Q4_1 the fused
    kernel computes a row alike in any batch (a batch's logits are one-row decoding's, bit for bit), where
    the unfused path multiplies a batch with other kernels (they differ)."""
    import re

    said: dict[str, str] = {}
    fused: dict[str, bool] = {}
    diffs: dict[str, float] = {}
    row_by_row = False
    for setting, arg in (("on", True), ("off", False), ("auto", None)):

        def load_and_decode(arg=arg):
            model = Model(bundled_model, n_ctx=256, n_batch=64, threads=1, flash_attn=arg)
            ids = model.tokenize("The quick brown fox jumps over the lazy dog, and then it runs far away into the woods.")
            return model, ids, model.decode(ids, logits_last=len(ids))

        (model, ids, batch), log = _verbose_log(capsys, monkeypatch, load_and_decode)
        try:
            found = re.findall(r"llama_context: flash_attn\s*=\s*(\w+)", log)
            assert found, f"llama.cpp did not log its flash-attention setting:\n{log[-3000:]}"
            said[setting], fused[setting] = found[-1], "FLASH_ATTN_EXT" in log
            assert model.flash_attn == setting
            row_by_row = model.row_by_row
            model.clear()
            rows = np.stack([model.decode([t], logits_last=1)[0] for t in ids])
            diffs[setting] = float(np.max(np.abs(batch - rows)))
        finally:
            model.close()
    assert said == {"on": "enabled", "off": "disabled", "auto": "auto"}, said
    assert fused["on"] and not fused["off"], fused  # the graph llama.cpp runs: the fused node, or not
    assert fused["auto"] == fused["on"], fused  # auto: llama.cpp's choice on this CPU (on, as the model docs say)
    if row_by_row:  # an AMX CPU: every batch is split into rows here, so a batch is one-row decoding
        pytest.skip(f"this CPU decodes row by row (AMX): the batch-vs-row logits cannot differ ({diffs})")
    assert diffs["on"] == 0.0, diffs  # the fused kernel: a row alike in any batch
    assert diffs["off"] > 0.0, diffs  # the unfused path: a batch's rows computed with other kernels


def test_a_cached_calibration_is_re_anchored_at_this_moments_single_row_once(tiny_target, tmp_path, monkeypatch):
    """The cache holds milliseconds of another hour. Before the first speculative round of a session that loaded
    it, three single-row decodes are timed and every cached timing is scaled by their median over the cached
    single row: the curve's shape (v(K)) is the cached one, its unit (t1) this moment's. Once per session; a
    factor outside :data:`RESCALE_BOUNDS` (a timing gone wrong) leaves the cached timings as they are. The
    timings here are the test's own (scratch decodes answered by a stub): the arithmetic, not this CPU's speed."""
    from specchat.engine.calibration import RESCALE_BOUNDS, replay_timings, rescale_cached_verify_cost
    from specchat.engine.telemetry import CostModel

    target = tmp_path / "t.gguf"
    target.symlink_to(tiny_target)
    cache = CalibrationCache(tmp_path / "calibration")
    slow_hour = [(r, 30.0 * (1 + 0.6 * (r - 1))) for r in CALIBRATION_ROWS for _ in range(2)]
    m = Model(target, n_ctx=256, n_batch=N_BATCH, threads=1)
    cache.save(CalibrationKey.for_model(m), slow_hour, m.weights)
    now_ms = [10.0]
    singles: list[int] = []
    real = Model.time_scratch_decode

    def stub(self, tokens):
        if len(tokens) == 1:
            singles.append(1)
            return now_ms[0]
        return real(self, tokens)

    monkeypatch.setattr(Model, "time_scratch_decode", stub)
    try:
        unscaled = CostModel()
        replay_timings(unscaled, slow_hour)
        cm = CostModel()
        assert rescale_cached_verify_cost(m, cm, cache, 1) == pytest.approx(1 / 3)
        assert cm.target_ms() == pytest.approx(10.0) and unscaled.target_ms() == pytest.approx(30.0)
        assert [cm.v(k) for k in range(65)] == pytest.approx([unscaled.v(k) for k in range(65)])
        now_ms[0] = 30.0 * RESCALE_BOUNDS[1] * 2  # a timing gone wrong
        assert rescale_cached_verify_cost(m, cm, cache, 1) is None and cm.target_ms() == pytest.approx(10.0)
    finally:
        m.close()

    now_ms[0] = 10.0
    dec = _cached_decoder(target, cache)
    try:
        assert dec.verify_source == "cache" and dec.cost_model.target_ms() == pytest.approx(30.0)
        dec.controls.set_auto_k(True)
        session = ChatSession(dec, n_predict=4)
        singles.clear()
        list(session.send(GREEDY_PROMPTS[0]))
        assert len(singles) == 3  # re-anchored before the first round
        singles.clear()
        list(session.send(GREEDY_PROMPTS[1]))
        assert singles == []  # once per session
    finally:
        dec.close()


def test_each_calibration_repetition_opens_with_an_uncounted_decode_so_a_cold_first_row_is_not_the_unit(
        tiny_target, monkeypatch):
    """The first decode after another model ran is cold (``specchat models tune`` interleaves six targets: on an
    AMD EPYC Zen 5 the F16's single row timed 21.6 ms there, 9 ms warm, and v(1) read 0.79 for a true 1.8). Each
    repetition of :func:`calibrate_verify_cost` decodes one row first and does not count it: here a stub target
    answers the first decode after "another model" 2.5x slow, and t1 and v(K) are the warm ones. Fails without
    the warm-up (the cold single row would be half the samples of the unit)."""
    from specchat.engine.calibration import WARM_UP_ROWS, calibrate_verify_cost
    from specchat.engine.telemetry import CostModel

    cold = [True]

    def stub(self, tokens):
        ms = 10.0 * (1 + 0.5 * (len(tokens) - 1))
        if cold[0]:
            cold[0] = False
            return 2.5 * ms
        return ms

    monkeypatch.setattr(Model, "time_scratch_decode", stub)
    m = Model(tiny_target, n_ctx=256, n_batch=N_BATCH, threads=1)
    try:
        cm = CostModel()
        timings = []
        for _ in range(2):  # the tune's order: one repetition per target, another model between them
            cold[0] = True
            timings += calibrate_verify_cost(m, cm, 1, CALIBRATION_ROWS, reps=1)
        assert cm.target_ms() == pytest.approx(10.0)
        assert cm.v(16) == pytest.approx(1 + 0.5 * 16)
        assert len(timings) == 2 * len(CALIBRATION_ROWS) and WARM_UP_ROWS == 1  # the warm-up is not a timing
        assert all(ms == pytest.approx(10.0 * (1 + 0.5 * (r - 1))) for r, ms in timings)
    finally:
        m.close()


def test_the_depth_buckets_double_from_256():
    assert [depth_bucket(n) for n in (0, 1, 255, 256, 511, 512, 1023, 1024, 1440, 2047, 2048, 5000)] == [
        0, 0, 0, 256, 256, 512, 512, 1024, 1024, 1024, 2048, 4096]


def test_a_conversation_grown_into_another_depth_bucket_is_priced_by_a_calibration_at_that_depth(
        tiny_target, tmp_path, monkeypatch):
    """v(K) is calibrated after the prompt, at its depth. When a later turn's context has grown past the next
    doubling (256, 512, ... tokens), auto-K's v(K) is timed again there and stored under that depth: a verify
    row's attention walks the whole context, so a short context's curve underprices a long one's verifies
    (:func:`~specchat.engine.calibration_cache.depth_bucket` has the measurement). A later session reaching that
    depth replays the stored curve, re-anchored at the moment's single row, instead of timing it again; a turn in
    the same bucket times nothing."""
    target = tmp_path / "t.gguf"
    target.symlink_to(tiny_target)
    cache = CalibrationCache(tmp_path / "calibration")
    timed: list[tuple[int, int]] = []  # (depth of the KV, rows) of every scratch decode
    real = Model.time_scratch_decode

    def recording(self, tokens):
        timed.append((len(self.tokens), len(tokens)))
        return real(self, tokens)

    monkeypatch.setattr(Model, "time_scratch_decode", recording)

    def calibrated_at(events: list[tuple[int, int]]) -> set[int]:
        """The depth buckets at which a whole calibration (its largest batch) was timed."""
        return {depth_bucket(d) for d, rows in events if rows == CALIBRATION_ROWS[-1]}

    def said(events: list) -> list[int]:
        """The depths the turn said it was timing (:class:`Calibrating`, before its :class:`PromptDone`)."""
        kinds = [type(e) for e in events]
        before = kinds.index(PromptDone)
        assert all(i < before for i, k in enumerate(kinds) if k is Calibrating)
        return [e.depth for e in events if isinstance(e, Calibrating)]

    dec = build_decoder(target, None, drafter="ngram", n_ctx=1024, calibration_cache=cache)
    try:
        dec.controls.set_auto_k(True)
        short = dec.target.tokenize(GREEDY_PROMPTS[0])
        long_ = (short * (300 // len(short) + 1))[:300]
        _, events = run_turn(dec, short, 4)
        assert calibrated_at(timed) == {0} and dec.verify_source == "measured"
        assert said(events) == [0]  # the seconds of timing are announced, so a UI need not look hung
        timed.clear()
        _, events = run_turn(dec, short + short[:3], 4)  # same bucket: nothing is timed again
        assert calibrated_at(timed) == set() and said(events) == []
        timed.clear()
        _, events = run_turn(dec, long_, 4)  # 299 tokens before the first verify: bucket 256
        assert calibrated_at(timed) == {256} and all(d >= 256 for d, _ in timed)
        assert said(events) == [256]
        assert {e.key.depth for e in cache.entries()} == {0, 256}
        assert dec.cost_model.verify.largest_measured_rows() == CALIBRATION_ROWS[-1]
    finally:
        dec.close()

    dec = build_decoder(target, None, drafter="ngram", n_ctx=1024, calibration_cache=cache)
    try:
        dec.controls.set_auto_k(True)
        timed.clear()
        _, events = run_turn(dec, long_, 4)  # a new session at 299 tokens: bucket 256's curve from the cache, re-anchored
        assert calibrated_at(timed) == set() and {rows for _, rows in timed} == {1}
        assert said(events) == []  # three single rows: nothing to announce
        assert dec.verify_source == "cache" and len(cache.entries()) == 2
    finally:
        dec.close()
