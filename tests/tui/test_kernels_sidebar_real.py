"""The app on the real bundled model says where its kernels came from (issue 20): with ``repack = "auto"`` and a
saved ``specchat models tune`` that measured the file faster without llama.cpp's repacked layouts, the target
loads without them and the sidebar's pair block says so, with the tune's figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from tuikit import SIZE, wait_ready

from specchat.commands.tui import make_factory
from specchat.config import Settings
from specchat.engine.calibration_cache import cpu_identity
from specchat.engine.model import extra_buffer_types_safe
from specchat.models.bundled import bundled_model_path
from specchat.models.tune_results import Mode, TuneResult, VariantResult, save_result
from specchat.tui.app import SpecChatApp


def _tune(path: Path, on_tok_s: float, off_tok_s: float) -> TuneResult:
    def variant(label: str, repack: str, tok_s: float) -> VariantResult:
        return VariantResult(label=label, file=path.name, path=str(path), weights="Q4_1", repack=repack,
                             source=repack == "auto", lossy=False, one_row=False, note="", flash_attn="auto",
                             modes={"plain chat": {"plain": Mode(tok_s=tok_s), "auto": Mode(tok_s=tok_s)}})

    return TuneResult(source=path.name, source_path=str(path), threads=1, split_threads_batch=None, drafter="ngram",
                      cpu=cpu_identity(), measured_at=1.0,
                      variants=[variant("Q4_1", "auto", on_tok_s), variant("Q4_1 repack-off", "off", off_tok_s)])


async def _pair_text(settings: Settings) -> tuple[str, bool]:
    app = SpecChatApp(make_factory(settings), settings, None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        text = str(app.chat_screen.sidebar.query_one("#pair").render())
        repack = app.engine.decoder.target.repack
    return text, repack


async def test_the_sidebar_names_the_kernels_a_saved_tune_chose(tmp_path: Path) -> None:
    if not extra_buffer_types_safe():
        pytest.skip("a one-row AMX CPU: repack auto is decided by its kernels (test_kernels), not by a tune")
    settings = Settings(target="bundled", draft="ngram", n_predict=8, n_ctx=512, threads=1, data_dir=tmp_path,
                        theme="specchat-dark")
    text, repack = await _pair_text(settings)
    assert repack is True and "kernels" not in text  # nothing measured: llama.cpp's default, nothing to say
    save_result(tmp_path, _tune(bundled_model_path(), 108.0, 119.2))  # the AMD EPYC Zen 5's figures
    text, repack = await _pair_text(settings)
    assert repack is False
    assert "kernels repack off: models tune, plain chat with auto-K, 108 tok/s on, 119 off" in " ".join(text.split())
