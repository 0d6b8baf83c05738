"""python3 -m ddpsim_torch --ranks N --wrap MODULE:FUNC [options]: check a
PyTorch DDP wrapper against ddpsim's reference DDP. Exit status as
ddpsim's: 0 pass, 1 divergence, 2 bad input, 3 fault (a rank failed, a
deadlock, the watchdog), 4 nothing verified, 130/143 interrupted by
SIGINT/SIGTERM (every rank stopped, nothing left behind)."""
import argparse
import os
import shlex
import signal
import sys


class Interrupted(BaseException):
    """SIGINT or SIGTERM: unwinds through every finally (ranks killed and reaped, recordings removed)."""

    def __init__(self, sig):
        BaseException.__init__(self, sig)
        self.sig = sig


def _on_signal(sig, frame):
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)  # one is enough: the cleanup it starts must not be cut short
    raise Interrupted(sig)


def parser():
    p = argparse.ArgumentParser(
        prog="python3 -m ddpsim_torch",
        description="Check a PyTorch DDP wrapper against ddpsim's reference DDP (PyTorch's semantics). The ranks "
                    "run on gloo through the wrapper's own forward, no_sync() and backward; a shadow copy of the "
                    "module computes every micro-step's plain local gradient; `ddpsim check` replays the "
                    "reference on the recording and compares at every grab.",
        epilog="The wrap function receives the module (the process group already initialised) and returns the "
               "wrapped module, which must have a no_sync() context manager; it also gets "
               "find_unused_parameters, bucket_cap_mb and gradient_as_bucket_view when it accepts them "
               "(torch.nn.parallel:DistributedDataParallel needs no adapter). Without --schedule, --scenario or "
               "--model the whole scenario battery runs. Exit status: 0 pass, 1 divergence, 2 bad input, "
               "3 fault (a rank failed, a deadlock, the watchdog), 4 nothing verified, 130/143 interrupted.")
    p.add_argument("--wrap", metavar="MODULE:FUNC",
                   help="the DDP wrapper: MODULE:FUNC or path/to/file.py:FUNC (required unless --train-loop)")
    p.add_argument("--ranks", "-n", type=int,
                   help="rank processes (default 2; under torchrun the ranks it started)")
    p.add_argument("--model", "-m", metavar="SPEC",
                   help="ddpsim's model (mlp:IN-H-...-OUT, branchy, attn; default mlp:32-64-64-16) or yours, "
                        "MODULE:FUNC returning a torch.nn.Module")
    p.add_argument("--data", metavar="MODULE:FUNC", help="with your model: batch(rank, index) -> (inputs, targets)")
    p.add_argument("--loss", metavar="MODULE:FUNC",
                   help="with your model: loss(output, targets) (default: cross-entropy for integer targets, "
                        "mean squared error otherwise)")
    p.add_argument("--schedule", "-s", metavar="SPEC", help="ddpsim's schedule grammar (ddpsim --help)")
    p.add_argument("--scenario", metavar="NAME", help="one scenario of the battery (ddpsim --scenarios)")
    p.add_argument("--seed", "-S", type=int, default=1, help="seed of init and data (default 1)")
    p.add_argument("--batch", "-b", type=int, default=4, help="rows per micro-batch of ddpsim's models (default 4)")
    p.add_argument("--lr", type=float, default=0.1, help="the step's learning rate, SGD's or AdamW's (default 0.1)")
    p.add_argument("--optimizer", metavar="sgd|momentum[:M]|adamw[:K=V,..]",
                   help="the reference's step, and the front end's own optimizer: torch.optim.SGD plain or with "
                        "momentum M (0.9 when not given), or torch.optim.AdamW with the keys beta1, beta2, eps, wd "
                        "(0.9, 0.999, 1e-8, 0.01 when not given); a wrapper's own optimizer must match it (default: "
                        "sgd, or the scenario's)")
    p.add_argument("--clip", metavar="MAX[:inf]",
                   help="clip_grad_norm_(max_norm=MAX, norm_type 2 or inf) before every step a training loop clips: "
                        "the wrapper's own clip_grad_norm_ when it has one, else torch's; every rank's coefficient "
                        "is checked against the reference's exact norm")
    p.add_argument("--loss-scale", metavar="S|dynamic[:I,G,B,N]",
                   help="torch's GradScaler around the step (the wrapper's ddpsim_grad_scaler, else "
                        "torch.amp.GradScaler; torch 1.13: its arithmetic by the front end): every backward's scale "
                        "and every unscale's finding are checked; powers of two (default: none, or the scenario's)")
    p.add_argument("--fault", action="append", metavar="inf|nan:rank=R,op=K",
                   help="an inf or NaN in element 0 of the first gradient rank R's backward at op K completes, "
                        "which the scaler must find on every rank (needs --loss-scale; may be repeated)")
    p.add_argument("--train-step", metavar="MODULE:FUNC",
                   help="your training step, FUNC(model, batch[, window]): the micro-batch's loss from the wrapped "
                        "model's output, normalized as your trainer does, then backward; run on ddpsim's token "
                        "model (ragged sequences), its factor judged at every backward against --loss-norm's")
    p.add_argument("--train-loop", metavar="MODULE:FUNC",
                   help="your whole training loop, FUNC(model, optimizer, batches, accumulation): it wraps the model "
                        "itself and trains on ddpsim's ragged batches as your trainer does; judged against windows of "
                        "--accumulation micro-batches and a shorter tail, each synced and stepped")
    p.add_argument("--accumulation", type=int, default=3,
                   help="with --train-loop: the accumulation count the loop is configured with (default 3)")
    p.add_argument("--micro-batches", type=int, default=8,
                   help="with --train-loop: the micro-batches it runs, a tail window when not a multiple of "
                        "--accumulation (default 8)")
    p.add_argument("--loss-norm", choices=("global-tokens", "micro-batch-mean", "sum"),
                   help="what the training step intends: every token of the window over their count on every rank "
                        "(global-tokens, the default), the mean of micro-batch means, or the sum")
    p.add_argument("--find-unused", action="store_true", help="find_unused_parameters=True")
    p.add_argument("--allow-unsynced-comm", action="store_true",
                   help="reductions in a backward that does not sync are allowed (torch 2.x counts them; PyTorch's "
                        "DDP makes none there)")
    p.add_argument("--find-unused-rule", choices=("window", "syncing-backward"),
                   help="which parameters find_unused syncs: used anywhere in the window (PyTorch >= 2.4) or by "
                        "the syncing backward (< 2.4); default: this torch's")
    p.add_argument("--params-only", action="store_true", default=None,
                   help="model averaging: the wrapper's optimizer averages the parameters over the ranks after each "
                        "rank's local step (PeriodicModelAverager with period 1, post-local SGD); no .grad is "
                        "compared, the parameters after every step are (default: the wrap function's "
                        "ddpsim_params_only attribute)")
    p.add_argument("--shard", metavar="MODE",
                   help="the wrapper's sharded data parallelism, judged by its rule: zero1, zero2, fsdp, hsdp or "
                        "hsdp:RxS (default: the wrap function's ddpsim_shard attribute, else DDP's rule)")
    p.add_argument("--bucket-view", action="store_true", help="gradient_as_bucket_view=True")
    p.add_argument("--bucket-cap", metavar="SIZE", help="bucket cap in bytes, K/M suffixes (default 25M)")
    p.add_argument("--static-graph", action="store_true",
                   help="static_graph=True (passed to the wrap function); scenarios torch 1.13 cannot run with it "
                        "are left out, with the reason")
    p.add_argument("--comm-hook", choices=("none", "allreduce", "fp16", "bf16"), default="none",
                   help="PyTorch's built-in communication hook: registered on a wrapper that has register_comm_hook "
                        "(DDP), and the reference does the same (default: none)")
    p.add_argument("--zero-grad", choices=("zeros", "none"),
                   help="what zero_grad does: fill zeros or None (default: this torch's optimizer.zero_grad())")
    p.add_argument("--tolerance", "-T", metavar="TOL",
                   help="as ddpsim check: bitwise | order | ulp:N | rtol=X,atol=Y (default bitwise at 2 ranks, "
                        "order above; order for --params-only)")
    p.add_argument("--timeout", "-t", type=float, default=60.0,
                   help="watchdog: stop when no rank progresses for SEC s (default 60; 0 off)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--keep", metavar="DIR", help="keep the recordings in DIR (ddpsim check DIR/<scenario>/record)")
    p.add_argument("--ddpsim", metavar="PATH", help="the ddpsim program (default: $DDPSIM, the installed one)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the verdict and the first divergence")
    p.add_argument("--junit", metavar="FILE",
                   help="write the verdicts as JUnit XML (xunit2): a testcase per scenario, or per check of one")
    p.add_argument("--html", metavar="FILE",
                   help="write the report as one self-contained HTML page (a heatmap per scenario and rank)")
    p.add_argument("--annotations", choices=("auto", "github", "none"), default="auto",
                   help="GitHub Actions annotations (::error at the wrapper, ::notice); auto: when GITHUB_ACTIONS=true")
    return p


def main(argv=None):
    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) is not signal.SIG_IGN:  # a launcher that ignores one (nohup, a shell's &) wins
            signal.signal(s, _on_signal)
    try:
        return _main(argv)
    except Interrupted as e:
        sys.stderr.write("ddpsim_torch: interrupted by signal %d (%s): every rank stopped, no verdict\n" % (
            e.sig, signal.Signals(e.sig).name))
        return 128 + e.sig


def _open_output(path):
    """--junit or --html FILE, created before any rank starts (ddpsim's rule for its output files): None, or why
    not."""
    if path == "-":
        return "give a file"
    if os.path.isdir(path):
        return "%s is a directory" % path
    try:
        with open(path, "w"):
            pass
    except OSError as e:
        return "cannot create %s: %s" % (path, e.strerror)
    return None


def _main(argv):
    args = parser().parse_args(argv)
    for option, path in (("--junit", args.junit), ("--html", args.html)):
        why = _open_output(path) if path else None
        if why:
            sys.stderr.write("ddpsim_torch: %s: %s\n" % (option, why))
            return 2
    from . import api, ci, launch, progress, torchrun  # after parsing: --help does not wait for torch
    launch.FORK_FROM_LAUNCHER = True  # this process is ours: its ranks fork from it (launch.py)
    progress.LINE = progress.Progress(sys.stderr.isatty() and not args.quiet)
    kw = dict(wrap=args.wrap, model=args.model, data=args.data, loss=args.loss, schedule=args.schedule,
              scenario=args.scenario, seed=args.seed, batch=args.batch, lr=args.lr, tolerance=args.tolerance,
              timeout=args.timeout, find_unused=args.find_unused, bucket_view=args.bucket_view,
              bucket_cap=args.bucket_cap, zero_grad=args.zero_grad, threads=args.threads, keep=args.keep,
              comm_hook=args.comm_hook, static_graph=args.static_graph, find_unused_rule=args.find_unused_rule,
              allow_unsynced_comm=args.allow_unsynced_comm, shard=args.shard, params_only=args.params_only,
              optimizer=args.optimizer, clip=args.clip, loss_scale=args.loss_scale, fault=args.fault or (),
              ddpsim_path=args.ddpsim, html=args.html, train_step=args.train_step, loss_norm=args.loss_norm,
              train_loop=args.train_loop, accumulation=args.accumulation, micro_batches=args.micro_batches)
    if torchrun.launched_by_torchrun():
        if args.junit or args.html:
            sys.stderr.write("ddpsim_torch: --junit and --html: not under torchrun (each rank would write them); run "
                             "python3 -m ddpsim_torch without torchrun\n")
            return 2
        return api.check_under_torchrun(ranks=args.ranks, **kw)
    r = api.check(ranks=2 if args.ranks is None else args.ranks, **kw)
    progress.LINE.clear()  # a run that ended early (a fault, bad input) may leave it
    text = r.report
    if args.quiet:
        text = "".join(line + "\n" for line in text.splitlines()
                       if line.startswith(("# verdict", "# first divergence", "# pattern", "# ranks disagree")))
    out = sys.stdout if r.exit_code in (0, 1, 4) else sys.stderr
    out.write(text)
    command = r.command or "python3 -m ddpsim_torch " + shlex.join(sys.argv[1:] if argv is None else argv)
    if ci.annotations_on(args.annotations):
        out.write(ci.annotations(r, command, ci.wrapper_location(args.wrap or args.train_loop)))
    out.flush()
    if args.junit:
        try:
            ci.write_junit(r, args.junit, command, r.left_out)
        except OSError as e:
            sys.stderr.write("ddpsim_torch: cannot write --junit %s: %s\n" % (args.junit, e.strerror))
            return r.exit_code or 3  # a failed write never hides a verdict that is not a pass
    return r.exit_code


if __name__ == "__main__":
    sys.exit(main())
