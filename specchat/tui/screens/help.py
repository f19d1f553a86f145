"""F1 / ctrl+g: the glossary first (the sidebar's terms and the colours), then the keys (with the keys in effect
after the config keymap) and their binding ids.

One screen for both, on the help key of the one key table (:data:`specchat.tui.keys.APP_KEYS`): a newcomer
who presses F1 is asking what the screen means, and the glossary is short enough to sit above the keys. The
colours are drawn with :func:`specchat.tui.widgets.token_view.kind_style`, the styles replies are drawn
with, so the glossary cannot show a colour the chat does not use. The terms follow the definitions of
:mod:`specchat.engine.telemetry.figures` (acceptance, α) and :mod:`specchat.engine.telemetry.speedup`
(E, S(K), v(K), c, break-even). Below the colours, *this* target's verify cost: the very texts of the sidebar's
"verify cost" block (headline, v(K) chart, reason: ``Sidebar.verify_texts``), handed over by the app when it
opens the screen, so help.py needs nothing from the engine.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from specchat.tui.keys import APP_KEYS, PROMPT_KEYS, RACE_KEYS, TOUR_KEYS
from specchat.tui.sanitize import sanitize, sanitize_line
from specchat.tui.widgets.paging import PagedVerticalScroll
from specchat.tui.widgets.token_view import kind_style

#: (term, one or two lines): what the sidebar's words mean
GLOSSARY = (
    ("acceptance", "accepted ÷ drafted: the share of the drafter's tokens the target kept."),
    ("α (alpha)", "acceptance per draft position: accepted ÷ (accepted + rejections). A rejection ends a "
     "round, so the tokens after it were never judged: α ≥ acceptance. The cost model predicts with α."),
    ("mean len", "mean accepted length: tokens a drafting round adds, 1 + accepted ÷ rounds with a draft."),
    ("K", "draft length: the most tokens the drafter may propose per round (a cap). Auto-K picks it every "
     "round; fixed K is the K keys' value."),
    ("v(K)", "verify cost: the target's time to check K drafted tokens + 1 in one batch, in single-token "
     "decodes (≥ 1). The sidebar charts v of K+1 rows per K (full bar: no batching gain; ◂ current K)."),
    ("c", "draft cost: the drafter's time per drafted token, in single-token target decodes (n-gram ≈ 0)."),
    ("break-even", "the smallest α at which some K beats plain decoding. A round yields E = 1 + α + … + α^K "
     "tokens for c·K + v(K) target decodes; with c ≥ 1 nothing pays."),
    ("windows", "this reply: every round of the reply so far. recent rounds: auto-K's window, this "
     "drafter's recent rounds weighted by age (α, break-even). A/B: finished turns since load."),
    ("auto-K", "warming up: first rounds of a drafter; holding: keeps K until another K is clearly better; "
     "off for cost: no K pays; probing: one round drafts to test again."),
)

#: (kind, meaning) of the reply's colours, in the order the legend shows them
COLOURS = (
    ("accepted", "a draft token the target kept (free speed)"),
    ("corrected", "the target's own token where it refused the draft"),
    ("bonus", "the extra token after a fully accepted draft"),
    ("plain", "decoded without speculation"),
    ("rejected", "ghost text: draft tokens the target refused; never part of the reply"),
)


def verify_text(verify: tuple[str, str, str]) -> Content:
    """This target's verify cost: the sidebar's (headline, chart, reason), each part only if there is one."""
    headline, chart, reason = verify
    parts = [Content.styled("\nVerify cost of this target\n", "bold"), Content(f"  {sanitize_line(headline)}\n")]
    for row in chart.splitlines():
        parts.append(Content(f"  {sanitize(row)}\n"))  # not sanitize_line: the columns' spaces stay
    if reason:
        parts.append(Content(f"  {sanitize_line(reason)}\n"))
    return Content.assemble(*parts)


def glossary_text(verify: tuple[str, str, str] | None = None) -> Content:
    """The terms, the colours, and this target's verify cost when the app gives it (``verify``: see
    :func:`verify_text`)."""
    parts: list[Content] = [Content.styled("Glossary\n", "bold")]
    for term, meaning in GLOSSARY:
        parts.append(Content.styled(term, "bold"))  # not indented: a wrapped meaning lines up with its term
        parts.append(Content(f"  {meaning}\n"))
    parts.append(Content.styled("\nColours\n", "bold"))
    for kind, meaning in COLOURS:
        parts.append(Content("  "))
        parts.append(Content.styled(f"{kind:<10}", kind_style(kind)))
        parts.append(Content(f" {meaning}\n"))
    if verify is not None:  # after the colours: at 60x20 the chart's dozen lines would push them off a page
        parts.append(verify_text(verify))
    return Content.assemble(*parts)


def help_text(effective_keys: dict[str, str], verify: tuple[str, str, str] | None = None) -> Content:
    parts: list[Content | str] = [glossary_text(verify)]
    parts.append(Content.styled("\nKeys\n", "bold"))
    for spec in (*PROMPT_KEYS, *APP_KEYS):
        keys = effective_keys.get(spec.id, spec.keys)
        parts.append(Content(f"  {sanitize_line(keys):<22} {spec.help}  [{spec.id}]\n"))
    parts.append(Content("  ctrl+p                 command palette: drafter, model, theme, K, temperature\n"))
    parts.append(Content.styled("\nOn the race and tour screens\n", "bold"))
    for spec in (*RACE_KEYS, *TOUR_KEYS):
        keys = effective_keys.get(spec.id, spec.keys)
        parts.append(Content(f"  {sanitize_line(keys):<22} {spec.help}  [{spec.id}]\n"))
    parts.append(
        Content(
            "\nRemap keys in config.toml, e.g.\n  [keymap]\n  k_up = \"alt+up\"      # binding id = keys\n"
            "  \"alt+s\" = \"stop\"     # or key = binding id\n"
            "The ids are shown in brackets above. Esc, F1 or ctrl+g closes this help."
        )
    )
    return Content.assemble(*parts)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,ctrl+g,q", "dismiss", "Close", show=False)]

    def __init__(self, effective_keys: dict[str, str], verify: tuple[str, str, str] | None = None) -> None:
        super().__init__()
        self._keys = effective_keys
        self._verify = verify

    def compose(self):
        with PagedVerticalScroll(id="help-box"):
            yield Static(help_text(self._keys, self._verify), id="help-text")

    def on_mount(self) -> None:
        box = self.query_one("#help-box")
        box.border_title = "specchat help \u00b7 glossary and keys"
        box.focus()  # page up / down, arrows and home / end scroll it (at 60x20 most of it is below)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
