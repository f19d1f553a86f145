"""A vertical scroll whose page keys add up: several PageDowns in one burst scroll several pages.

Textual's ``scroll_page_down`` scrolls to ``scroll_y + page`` with an animation, and ``scroll_y`` is where the
animation *is*, not where it is going: keys that arrive in one burst (a held key's auto-repeat, tmux
``send-keys``, a loaded machine delivering three presses at once) all run before the first frame of the
animation (``scroll_to`` even sets its target only after the next refresh), each aims one page below the
unmoved position, and the burst scrolls one page. Here a page is counted from ``scroll_target_y``, where the
scroll in flight ends (as Textual's own ``scroll_down`` does for single lines), set at once, so N presses are
N pages whenever they arrive.
"""

from __future__ import annotations

from typing import Any

from textual.containers import VerticalScroll


class PagedVerticalScroll(VerticalScroll):
    """:class:`~textual.containers.VerticalScroll` with page up / down counted from the scroll's target."""

    def scroll_page_down(self, **kwargs: Any) -> None:
        self._page(+1, kwargs)

    def scroll_page_up(self, **kwargs: Any) -> None:
        self._page(-1, kwargs)

    def _page(self, direction: int, kwargs: dict[str, Any]) -> None:
        # immediate: Textual's scroll_to otherwise waits for the next refresh to set the target, and the
        # presses of one burst would all read the unmoved one
        kwargs.setdefault("immediate", True)
        self.scroll_to(y=self.scroll_target_y + direction * self.scrollable_content_region.height, **kwargs)


__all__ = ["PagedVerticalScroll"]
