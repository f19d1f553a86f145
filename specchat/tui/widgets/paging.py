"""A vertical scroll whose page keys add up: several PageDowns in one burst scroll several pages.

Textual's ``scroll_page_down`` scrolls to ``scroll_y + page`` with an animation, and ``scroll_y`` is where the
animation *is*, not where it is going: keys that arrive in one burst (a held key's auto-repeat, tmux
``send-keys``, a loaded machine delivering three presses at once) all run before the first frame of the
animation, each aims one page below the unmoved position, and the burst scrolls one page. Here a page is
counted from ``scroll_target_y``, where the scroll in flight ends (as Textual's own ``scroll_down`` does for
single lines), so N presses are N pages whenever they arrive.
"""

from __future__ import annotations

from typing import Any

from textual.containers import VerticalScroll


class PagedVerticalScroll(VerticalScroll):
    """:class:`~textual.containers.VerticalScroll` with page up / down counted from the scroll's target."""

    def scroll_page_down(self, **kwargs: Any) -> None:
        self.scroll_to(y=self.scroll_target_y + self.scrollable_content_region.height, **kwargs)

    def scroll_page_up(self, **kwargs: Any) -> None:
        self.scroll_to(y=self.scroll_target_y - self.scrollable_content_region.height, **kwargs)


__all__ = ["PagedVerticalScroll"]
