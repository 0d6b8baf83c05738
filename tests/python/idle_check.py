"""The front end's deadlock rule calls a rank idle only when it is blocked (launch._idle): a rank that uses
little CPU because the machine is loaded is runnable, and must never be called deadlocked.

Starved: a busy loop under SCHED_IDLE beside three ordinary busy loops per core gets a fraction of a percent of
a core, under IDLE_CPU_SHARE, and is runnable (R): not idle. Blocked: a process waiting on a pipe is idle. The
detector fires on the blocked one, so the test can fail both ways.

    PYTHONPATH=python python3 tests/python/idle_check.py
"""
import os
import subprocess
import sys
import time

from ddpsim_torch import launch

BUSY = [sys.executable, "-c", "while True: pass"]
WINDOWS = 5


class Proc:
    def __init__(self, pid):
        self.pid = pid


def share(pid, seconds):
    """_idle's verdict on pid after watching it for seconds, and the share of a core it used."""
    before = launch._cpu_seconds(pid)
    time.sleep(seconds)
    used = launch._cpu_seconds(pid) - before
    return launch._idle([Proc(pid)], [0], [before], seconds), used / seconds


def main():
    hogs = [subprocess.Popen(BUSY) for _ in range(3 * (os.cpu_count() or 1))]
    starved = subprocess.Popen([sys.executable, "-c", "import os\n"
                                "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
                                "while True: pass"])
    blocked = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        time.sleep(1)  # the starved loop's share settles, the blocked one is waiting on its pipe
        # A loaded CI machine can hand the SCHED_IDLE loop a core for a while (16% was seen once in 3 s), so
        # watch up to WINDOWS windows until one starves it: the claim needs a share under IDLE_CPU_SHARE, so
        # that the CPU rule alone would call it idle and only the runnable state saves it. Every window,
        # starved or not, must say "not idle".
        for window in range(WINDOWS):
            idle, used = share(starved.pid, 3.0)
            print("starved rank, window %d: %.1f%% of a core, idle=%s" % (window + 1, 100 * used, idle))
            assert not idle, "a runnable rank at %.1f%% of a core was called idle" % (100 * used)
            if used < launch.IDLE_CPU_SHARE:
                break
        else:
            raise AssertionError("the SCHED_IDLE loop was not starved in %d windows" % WINDOWS)
        idle, used = share(blocked.pid, 1.0)
        print("blocked rank: %.1f%% of a core, idle=%s" % (100 * used, idle))
        assert idle, "a rank blocked on a pipe was not called idle"
        assert not launch._runnable(blocked.pid) and launch._runnable(starved.pid)
    finally:
        for p in hogs + [starved, blocked]:
            p.kill()
            p.wait()
    print("idle_check: a starved rank is not idle, a blocked one is")


if __name__ == "__main__":
    sys.exit(main())
