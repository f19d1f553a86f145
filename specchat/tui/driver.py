"""The terminal driver: Textual's Linux driver, with a lone Esc delivered after ESCDELAY instead of up to 100 ms.

A terminal sends the Esc key as the byte ESC, which also begins every escape sequence (arrows, F-keys), so
Textual's parser waits ``ESCDELAY`` (see :data:`specchat.commands.tui.ESCAPE_DELAY_MS`) for more bytes before
it calls the byte the Esc key. But its Linux input thread only checks that wait when ``select`` returns, and
``select`` sleeps up to 100 ms: measured through a pty (tests/perf/ui_latency.py), Esc reached the app's stop
action 105-113 ms after it was written, with ESCDELAY = 50 ms. Esc is the stop key, so this driver's input
thread sleeps only until the parser's deadline while an escape sequence is pending (100 ms otherwise, as
Textual's). The loop is Textual 8's ``LinuxDriver.run_input_thread`` with that one change.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder

from textual._loop import loop_last
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

#: how long the input thread sleeps when no escape sequence is pending (Textual's own value)
IDLE_POLL_S = 0.1


class FastEscapeLinuxDriver(LinuxDriver):
    def run_input_thread(self) -> None:
        """Wait for input and dispatch events (see the module docstring for the one change)."""
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        fileno = self.fileno
        EVENT_READ = selectors.EVENT_READ
        parser = XTermParser(self._debug)
        feed = parser.feed
        tick = parser.tick
        decode = getincrementaldecoder("utf-8")().decode
        read = os.read

        def poll_timeout() -> float:
            deadline = getattr(parser, "_timeout_time", None)  # set while an escape sequence is pending
            if deadline is None:
                return IDLE_POLL_S
            return min(IDLE_POLL_S, max(0.0, deadline - get_time()))

        def process_selector_events(selector_events, final: bool = False) -> None:
            for last, (_selector_key, mask) in loop_last(selector_events):
                if mask & EVENT_READ:
                    unicode_data = decode(read(fileno, 1024 * 4), final=final and last)
                    if not unicode_data:
                        break
                    for event in feed(unicode_data):
                        self.process_message(event)
            for event in tick():
                self.process_message(event)

        try:
            while not self.exit_event.is_set():
                process_selector_events(selector.select(poll_timeout()))
            selector.unregister(self.fileno)
            process_selector_events(selector.select(0.1), final=True)
        finally:
            selector.close()
            try:
                for _event in feed(""):
                    pass
            except (EOFError, ParseError):
                pass
