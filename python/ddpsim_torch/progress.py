"""The command line's progress on one rewritten line of standard error (ddpsim's sim/progress.c does the same):
"ranks: scenario 3 of 21: window-5 (4.2 s)", then "ddpsim check: scenario ...". Only on a terminal and never with
--quiet; check() called from a program (pytest) shows none."""
import sys
import time


class Progress:
    def __init__(self, on=False):
        self.on = on
        self.shown = False
        self.t0 = time.monotonic()
        self.last = None

    def show(self, text):
        if not self.on or text == self.last:
            return
        sys.stderr.write("\r%s (%.1f s)\033[K" % (text, time.monotonic() - self.t0))  # ESC [ K: the rest erased
        sys.stderr.flush()
        self.shown, self.last = True, text

    def clear(self):
        if self.on and self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        self.shown, self.last = False, None


LINE = Progress()  # the command line's (__main__ turns it on); off for check() from a program
