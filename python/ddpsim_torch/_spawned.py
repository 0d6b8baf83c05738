"""The first thing a rank process does, before it imports torch (the package imports this first): a process
that multiprocessing's spawn started (its command line ends in --multiprocessing-fork) asks the kernel to kill
it when the launcher dies, however the launcher dies (PR_SET_PDEATHSIG: set at the rank's start, not after
torch's import, a window of seconds in which a SIGKILLed launcher left ranks running on), and leads a process
group of its own, so that the launcher ends whatever the rank's code started (a --wrap that forks) with it."""
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def _spawning():
    """Whether this process is a spawned child still being set up: spawn marks the current process as
    inheriting while it imports the parent's main module and unpickles the target (multiprocessing/spawn.py
    _main), which is when this runs; the original command line ends in --multiprocessing-fork (sys.argv is the
    parent's by then)."""
    import multiprocessing.process
    return getattr(multiprocessing.process.current_process(), "_inheriting", False) or \
        "--multiprocessing-fork" in getattr(sys, "orig_argv", ())


def start():
    if not _spawning():
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    if os.getppid() == 1:  # the launcher died before the request above: nobody will read this rank
        os._exit(1)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass


start()
