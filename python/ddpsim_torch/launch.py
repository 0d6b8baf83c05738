"""Starting N rank processes (forked from the launcher, or from multiprocessing's fork server) on one gloo
process group and supervising them: a rank's error (bad input or a fault)
stops every rank at once; a rank that finished its schedule while the
others make no progress is a deadlock, named; no progress at all for
--timeout seconds is the watchdog. Every rank is killed and reaped before
this returns, whatever happened."""
import importlib
import os
import queue
import signal
import tempfile
import threading
import time

import torch.multiprocessing as mp

from . import progress as _progress  # the module: `progress` here is the ranks' shared array
from . import rank as rank_mod
from .loading import BadInput


class Fault(Exception):
    """The run broke (exit 3): a rank failed or died, a deadlock, the watchdog."""


class Unsupported(Fault):
    """A job's scenario needs what the wrapper lacks (loading.Unsupported, from a rank): not run, not a fault."""


# A rank blocked in a collective that its peers never join stays blocked, and idle; a slow op ends, and
# computes meanwhile. After a rank has finished, the others are deadlocked when none has progressed for this
# many times the slowest op any rank has taken so far (at least DEADLOCK_MIN_S) while blocked: using almost no
# CPU and with no thread runnable (_idle).
DEADLOCK_SLOW_OPS = 4.0
DEADLOCK_MIN_S = 2.0
IDLE_CPU_SHARE = 0.05
STARTUP_S = 120.0  # the longest a rank may take to import torch and join the process group (or --timeout)


def _cpu_seconds(pid):
    """The CPU time the process has used (user + system, every thread), from /proc; None where unknown."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _where(progress, r, ops_of):
    row = r * rank_mod.ROW
    job, op = int(progress[row + rank_mod.JOB]), int(progress[row + rank_mod.OP])
    ops = ops_of(job)
    if op == rank_mod.STARTING:
        return "starting (importing torch, joining the process group)"
    if op < 0:
        return "setting up"
    return "op %d (%s)" % (op, ops[op]) if op < len(ops) else "the end"


# The ranks are forked from multiprocessing's fork server, a fresh interpreter that the launcher starts and that
# imports these first, once for all ranks (a rank is still a process that ran nothing before its job: no
# process group, no CUDA, no thread pool). Spawning each rank imported torch in each: under torch 2.15 (a CUDA
# build, 2 s to import here) and its DDP, whose construction imports torch._dynamo (900 modules, 1.4 s), that was
# most of a short run's time and CPU (doc/MEASUREMENTS.md). A module that is missing (torch._dynamo before 2.0)
# is skipped by the fork server.
FORK_SERVER_PRELOAD = ["ddpsim_torch.rank", "torch._dynamo"]

# The command line (python3 -m ddpsim_torch, __main__.py) forks its ranks itself: it is a process of ours that has
# imported torch, the front end and the user's modules and run no torch op, which is what the fork server is, and a
# fork server's interpreter, imports and stop cost a short check about 2 s of CPU under either torch
# (doc/MEASUREMENTS.md, "The command line forks its own ranks"). check() runs inside the caller's process, whose
# state is not ours to fork: it keeps the fork server. Either way a rank has run nothing of its job before it
# starts: no process group, no CUDA.
FORK_FROM_LAUNCHER = False


def _fork_directly():
    """Whether this run forks its ranks from this process: asked for (FORK_FROM_LAUNCHER), and no thread of
    Python's running here (a thread holding a lock at the fork leaves that lock held in every rank). OpenBLAS's
    pool, which importing torch starts, is no obstacle: OpenBLAS stops it before a fork (pthread_atfork), as it
    does for the fork server's."""
    return FORK_FROM_LAUNCHER and threading.active_count() == 1


def _preload():
    """What the fork server would have imported, imported here once for every rank."""
    for name in FORK_SERVER_PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # torch._dynamo before torch 2.0
            pass


def _stop_fork_server():
    """The fork server ends with each run(): the next starts one from the environment as it is then (a rank
    forked from an older one would have the environment of the first run). multiprocessing's own stop, which
    its tests use; a Python without it keeps the server until the launcher exits."""
    from multiprocessing import forkserver
    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def run(cfg, nranks, timeout, job_names):
    """Run cfg's jobs on nranks ranks; returns one outcome per job, None (it ran to its end) or the Fault that
    stopped it, and the time the ranks took: {"ranks_s", "shadow_s", "record_s"} (the last two the largest
    rank's). A fault ends that job's processes; the jobs after it run on fresh ones. Raises BadInput (a rank
    found the input unusable: every job would)."""
    outcomes, first = [], 0
    timing = {"ranks_s": 0.0, "shadow_s": 0.0, "record_s": 0.0}
    try:
        while first < len(cfg["jobs"]):
            t0 = time.monotonic()
            done, fault = _run_from(cfg, nranks, timeout, job_names, first, timing)
            timing["ranks_s"] += time.monotonic() - t0
            outcomes += [None] * (done - first)
            if fault is None:
                break
            outcomes.append(fault)
            first = done + 1
    finally:
        _stop_fork_server()
    return outcomes, timing


def _run_from(cfg, nranks, timeout, job_names, first, timing):
    """Jobs first.. on fresh rank processes: (the first job not completed, its Fault or None)."""
    if _fork_directly():
        _preload()
        ctx = mp.get_context("fork")
    else:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(FORK_SERVER_PRELOAD)
    progress = ctx.Array("d", [0.0] * (nranks * rank_mod.ROW), lock=False)
    for r in range(nranks):
        progress[r * rank_mod.ROW + rank_mod.JOB] = first
        progress[r * rank_mod.ROW + rank_mod.OP] = rank_mod.STARTING
    errors = ctx.Queue()
    barrier = ctx.Barrier(nranks)
    with tempfile.TemporaryDirectory(prefix="ddpsim_torch-store-%d-" % os.getpid()) as store_dir:
        cfg = dict(cfg, store=os.path.join(store_dir, "store"), timeout=timeout, first_job=first)
        procs = [ctx.Process(target=rank_mod.main, args=(r, nranks, cfg, progress, errors, barrier), daemon=True)
                 for r in range(nranks)]
        try:
            for p in procs:
                p.start()
            _supervise(procs, progress, errors, timeout, lambda j: cfg["jobs"][j]["ops"], job_names)
            return len(cfg["jobs"]), None
        except Fault as e:
            return min(int(progress[r * rank_mod.ROW + rank_mod.JOB]) for r in range(nranks)), e
        finally:
            for p in procs:
                _end_group(p)
            for p in procs:
                p.join()
            errors.close()
            for key, col in (("shadow_s", rank_mod.SHADOW_S), ("record_s", rank_mod.RECORD_S)):
                timing[key] += max(progress[r * rank_mod.ROW + col] for r in range(nranks))


def _end_group(p):
    """Kill rank p and everything its code started: each rank leads its own process group (_rank_process.py), so a
    --wrap that forked leaves nothing running after the verdict."""
    if p.pid is None:
        return
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass  # no such group (yet, or any more): the rank alone
    if p.is_alive():
        p.kill()


def _first_dead(procs, r, wait_s=0.5):
    """A rank other than r that died (exit code not 0) by now, waiting up to wait_s for one to be noticed: when
    rank r reports an error, a peer's death is most often its cause ("Connection closed by peer"). None when
    every other rank lives or finished."""
    deadline = time.monotonic() + wait_s
    while True:
        for q, p in enumerate(procs):
            if q != r and p.exitcode not in (None, 0):
                return q
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _how(code):
    return "was killed by signal %d (%s)" % (-code, signal.Signals(-code).name) if code < 0 else \
        "exited with code %d" % code


def _runnable(pid):
    """Whether any thread of the process is running or waiting for a core (R) or in an uninterruptible wait (D),
    from /proc/PID/task/*/stat; a process that cannot be read counts as runnable (never called idle)."""
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return True
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread has ended since the listing
        if state in ("R", "D"):
            return True
    return False


def _idle(procs, ranks, cpu_then, seconds):
    """Whether every one of ranks is blocked: none of its threads runnable now, and less than IDLE_CPU_SHARE of a
    core used since the last progress. Low CPU alone is not enough: a rank starved by a loaded machine uses
    little CPU too, but it is runnable (R), and it will progress."""
    for r in ranks:
        now = _cpu_seconds(procs[r].pid)
        if now is None or cpu_then[r] is None or now - cpu_then[r] > IDLE_CPU_SHARE * seconds:
            return False
        if _runnable(procs[r].pid):
            return False
    return True


def _supervise(procs, progress, errors, timeout, ops_of, job_names):
    n = len(procs)
    seen = [None] * n
    started = time.monotonic()
    last_change = started
    cpu_then = [None] * n
    while True:
        try:
            kind, r, message = errors.get(timeout=0.05)
            dead = _first_dead(procs, r) if kind == "fault" else None
            for p in procs:
                p.kill()  # the others may wait in a collective for the rank that failed
            if kind == "bad":
                raise BadInput(message)
            if kind == "unsupported":
                raise Unsupported(message)
            if dead is not None:  # the cause first, then what it did to the rank that spoke
                raise Fault("rank %d %s in %s; then rank %d failed: %s" % (
                    dead, _how(procs[dead].exitcode), _where(progress, dead, ops_of), r, message))
            raise Fault("rank %d failed: %s" % (r, message))
        except queue.Empty:
            pass
        now = time.monotonic()
        state = [tuple(progress[r * rank_mod.ROW:(r + 1) * rank_mod.ROW]) for r in range(n)]
        if state != seen:
            seen, last_change = state, now
            cpu_then = [_cpu_seconds(p.pid) for p in procs]
            job = min(int(progress[r * rank_mod.ROW + rank_mod.JOB]) for r in range(n))  # the slowest rank's
            if len(job_names) > 1 and 0 <= job < len(job_names):
                _progress.LINE.show("ranks: scenario %d of %d: %s" % (job + 1, len(job_names), job_names[job]))
        codes = [p.exitcode for p in procs]
        if all(c == 0 for c in codes):
            return
        for r, c in enumerate(codes):
            if c not in (None, 0):
                time.sleep(0.2)  # its message may still be on the way
                try:
                    kind, r2, message = errors.get_nowait()
                    if kind == "bad":
                        raise BadInput(message)
                    if kind == "unsupported":
                        raise Unsupported(message)
                    if r2 != r:  # r died first: its peer's error is the consequence
                        raise Fault("rank %d %s in %s; then rank %d failed: %s" % (
                            r, _how(c), _where(progress, r, ops_of), r2, message))
                    raise Fault("rank %d failed: %s" % (r2, message))
                except queue.Empty:
                    pass
                raise Fault("rank %d %s in %s" % (r, _how(c), _where(progress, r, ops_of)))
        if any(progress[r * rank_mod.ROW + rank_mod.OP] == rank_mod.STARTING for r in range(n)):
            # Starting a rank (a Python, torch, the rendezvous) is not an op: the watchdog starts after it.
            if now - started > max(STARTUP_S, timeout):
                raise Fault("rank %s did not start within %g s" % (
                    ", ".join(str(r) for r in range(n) if progress[r * rank_mod.ROW + rank_mod.OP] ==
                              rank_mod.STARTING), max(STARTUP_S, timeout)))
            continue
        done = [r for r in range(n) if progress[r * rank_mod.ROW + rank_mod.STATE] != rank_mod.RUNNING]
        slowest = max(progress[r * rank_mod.ROW + rank_mod.SLOWEST] for r in range(n))
        grace = min(timeout, max(DEADLOCK_MIN_S, DEADLOCK_SLOW_OPS * slowest)) if timeout > 0 else \
            max(DEADLOCK_MIN_S, DEADLOCK_SLOW_OPS * slowest)
        waiting = [r for r in range(n) if r not in done]
        if done and waiting and now - last_change > grace and _idle(procs, waiting, cpu_then, now - last_change):
            job = int(progress[done[0] * rank_mod.ROW + rank_mod.JOB])
            plural = lambda rs: ("ranks " if len(rs) > 1 else "rank ") + ", ".join(map(str, rs))
            raise Fault("deadlock: %s finished %s while %s wait%s, idle, with no progress for %.1f s (%s): a "
                        "collective that %s never joined" % (
                            plural(done), "the schedule" if job_names[job] == "schedule" else
                            "scenario " + job_names[job], plural(waiting), "" if len(waiting) > 1 else "s",
                            now - last_change,
                            ", ".join("rank %d in %s" % (r, _where(progress, r, ops_of)) for r in waiting),
                            plural(done)))
        # Setting up a job (building the module, wrap(): a framework may compile or shard there) is not an op:
        # --timeout counts from the ops, and setting up has the start-up limit.
        setting_up = [r for r in range(n) if r not in done and progress[r * rank_mod.ROW + rank_mod.OP] < 0]
        limit = max(STARTUP_S, timeout) if setting_up else timeout
        if timeout > 0 and now - last_change > limit:
            raise Fault("watchdog: no rank progressed for %g s%s: %s" % (
                limit, " (setting up: building the module, wrap())" if setting_up else "",
                "; ".join("rank %d %s" % (r, _where(progress, r, ops_of)) for r in range(n))))
