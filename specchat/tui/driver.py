"""The terminal driver: Textual's Linux driver, with a lone Esc delivered after ESCDELAY instead of up to 100 ms.

A terminal sends the Esc key as the byte ESC, which also begins every escape sequence (arrows, F-keys), so
Textual's parser waits ``ESCDELAY`` (see :data:`specchat.commands.tui.ESCAPE_DELAY_MS`) for more bytes before
it calls the byte the Esc key. But its Linux input thread only checks that wait when ``select`` returns, and
``select`` sleeps up to 100 ms: measured through a pty (tests/perf/ui_latency.py), Esc reached the app's stop
action 105-113 ms after it was written, with ESCDELAY = 50 ms. Esc is the stop key, so this driver's input
thread sleeps only until the parser's deadline while an escape sequence is pending (100 ms otherwise, as
Textual's). The loop is Textual 8's ``LinuxDriver.run_input_thread`` with that change and one more:

**An ESC ends the sequence before it.** Textual's parser, given a new ESC while a sequence is pending, reissues
the pending one with its ESC shown as ``^``: Alt+g (ESC g, which the parser holds for ESCDELAY in case more
follows) then an arrow within ESCDELAY typed "^g" into the prompt. At ESCDELAY 80 ms (a wait split arrow keys
cannot beat: :data:`specchat.commands.tui.ESCAPE_DELAY_MS`) that is an Alt+key and an arrow typed briskly. So
before input that begins with ESC, a pending sequence is resolved as if its wait had run out (``tick`` with
the deadline passed): ESC g is Alt+g, a lone ESC is Esc, exactly as when nothing follows.
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
ESC = "\x1b"


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

        def feed_in_order(text: str) -> None:
            """Feed ``text``, ending a pending sequence at each ESC that follows it (see the module docstring)."""
            for i, part in enumerate(text.split(ESC)):
                if i:
                    if getattr(parser, "_timeout_time", None) is not None:  # a sequence is pending: it is complete
                        parser._timeout_time = 0.0
                        for event in tick():
                            self.process_message(event)
                    part = ESC + part
                if part:
                    for event in feed(part):
                        self.process_message(event)

        def process_selector_events(selector_events, final: bool = False) -> None:
            for last, (_selector_key, mask) in loop_last(selector_events):
                if mask & EVENT_READ:
                    unicode_data = decode(read(fileno, 1024 * 4), final=final and last)
                    if not unicode_data:
                        break
                    feed_in_order(unicode_data)
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
