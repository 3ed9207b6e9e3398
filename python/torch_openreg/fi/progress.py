"""A plain-text progress line on stderr: runs done, outcome counts, rate,
time left. Redrawn in place on a terminal; elsewhere (logs, CI) printed as
a new line at every tenth of the campaign."""

import sys
import time

from torch_openreg.fi.classify import OUTCOMES

__all__ = ["Progress"]


class Progress:
    def __init__(self, total, done_before, counts, stream=None, enabled=True):
        self.total = total
        self.done = done_before
        self.session_done = 0
        self.counts = dict(counts)
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._last_tenth = -1

    def rate(self):
        """Runs per minute in this session."""
        elapsed = time.monotonic() - self.started
        return 60 * self.session_done / elapsed if elapsed > 0 else 0.0

    def line(self):
        width = 24
        filled = width * self.done // max(self.total, 1)
        rate = self.rate()
        left = (self.total - self.done) / rate * 60 if rate else 0
        counts = " ".join(f"{name} {self.counts.get(name, 0)}"
                          for name in OUTCOMES)
        return (f"[{'#' * filled}{'.' * (width - filled)}] "
                f"{self.done}/{self.total}  {counts}  {rate:.1f} runs/min  "
                f"{left:.0f} s left")

    def update(self, outcome):
        self.done += 1
        self.session_done += 1
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + self.line())
            self.stream.flush()
            return
        tenth = 10 * self.done // max(self.total, 1)
        if tenth != self._last_tenth:
            self._last_tenth = tenth
            print(self.line(), file=self.stream, flush=True)

    def finish(self):
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
