"""How a rank process stays tied to its launcher. The ranks are forked by the command line's launcher, or by
multiprocessing's fork server (launch.py), which the launcher starts and which has imported torch once for all of
them; a rank's first act (become_rank, before it reads its job) is to ask the kernel to kill it when its parent
dies, however the parent dies (PR_SET_PDEATHSIG; the fork server ends as soon as the launcher does,
multiprocessing/forkserver.py's "alive" pipe, so a SIGKILLed launcher leaves no rank running on), and to lead a
process group of its own, so that the launcher ends whatever the rank's code started (a --wrap that forks) with it.
The fork server asks the same at its start (the package imports this first): while it imports torch, a launcher
killed leaves nothing behind."""
import atexit
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    if os.getppid() == 1:  # the parent died before the request above: nobody will read this process
        os._exit(1)


def _fork_server():
    """Whether this process is multiprocessing's fork server (its command line imports
    multiprocessing.forkserver's main), importing the package as its preload."""
    return any("multiprocessing.forkserver" in a for a in getattr(sys, "orig_argv", ()))


def become_rank():
    """A rank's first act. A rank forked from the command line (launch.py) has its SIGINT and SIGTERM handlers:
    it takes back Python's defaults, as a fork server's rank has them (an ignored signal stays ignored)."""
    _die_with_parent()
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        handler = signal.getsignal(sig)
        if callable(handler) and handler is not default:
            signal.signal(sig, default)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass


if _fork_server():
    _die_with_parent()
    # Asked to stop (launch.py, at the end of each run), the server would tear down torch's thousands of modules
    # (a second, which the launcher waits for); this handler, the first registered, runs last and skips that.
    atexit.register(os._exit, 0)
