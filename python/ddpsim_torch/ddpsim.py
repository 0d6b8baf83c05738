"""The ddpsim program, which holds everything the front end does not:
the schedule grammar, the scenarios, the models' initial parameters and
batches (`ddpsim --prepare`), and the semantics (`ddpsim check`)."""
import json
import os
import shutil
import subprocess

from .loading import BadInput


def find(explicit=None):
    """The ddpsim binary: the argument, $DDPSIM, the one `make install` put beside this package, the
    build tree's (running in-tree), or the PATH's."""
    here = os.path.dirname(os.path.abspath(__file__))
    if explicit and not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
        raise BadInput("--ddpsim %s: not an executable file; cannot find the ddpsim program" % explicit)
    candidates = [explicit, os.environ.get("DDPSIM")]
    try:
        from . import _install  # written by make install: where it installed ddpsim
        candidates.append(_install.DDPSIM)
    except ImportError:
        pass
    candidates.append(os.path.join(here, "..", "..", "sim", "ddpsim"))
    candidates.append(shutil.which("ddpsim"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise BadInput("cannot find the ddpsim program: build it (make), or give --ddpsim PATH or DDPSIM=PATH")


def run(binary, args, **kw):
    return subprocess.run([binary] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, **kw)


def version(binary):
    p = run(binary, ["--version"])
    return p.stdout.split("\n")[0].strip() or "ddpsim"


def scenarios(binary):
    """The names of ddpsim's scenario battery, in its order."""
    p = run(binary, ["--scenarios"])
    if p.returncode != 0:
        raise BadInput("ddpsim --scenarios failed: %s" % p.stderr.strip())
    return [line.split()[0] for line in p.stdout.splitlines() if line and not line[0].isspace()
            and not line.startswith("#")]


# The dump manifest's op names (engine/io/dump.c) as the recorded run's (the schedule's).
_OPS = {"no_sync_enter": "enter", "no_sync_exit": "exit", "forward": "fwd", "backward": "bwd", "grab": "grab",
        "zero_grad": "zero", "step": "step", "join_enter": "join_enter", "join_exit": "join_exit"}


def prepare(binary, directory, run_args):
    """ddpsim --prepare DIR with the run's options: ddpsim checks them (exit 2 with its message) and writes the
    manifest, init and batches. Returns the manifest's ops (schedule names) and clips ([op, max_norm,
    norm_type] each), ddp options, lr and model, the loss scaler's spec (None: none) and the planted infs and
    NaNs ({"kind", "rank", "op"}), the token model's loss normalization (None: no token loss), the
    schedule's join blocks and uneven repetitions (their counts resolved for the run's ranks), and "rearms":
    whether a syncing backward runs through a later forward than the one that armed it (ddpsim's arming)."""
    p = run(binary, list(run_args) + ["--prepare", directory, "--quiet"])
    if p.returncode != 0:
        raise BadInput(p.stderr.strip().split("\n")[0].replace("ddpsim: ", "", 1))
    with open(os.path.join(directory, "manifest.json")) as f:
        m = json.load(f)
    ops, forwards, rearms, clips = [], 0, False, []
    for o in m["ops"]:
        if o["op"] == "clip":  # clip_grad_norm_'s arguments, by the op's index
            clips.append([len(ops), o["max_norm"], o["norm_type"]])
            ops.append("clip")
            continue
        if o["op"] not in _OPS:
            raise BadInput("ddpsim --prepare wrote an op this front end does not know: %s" % o["op"])
        ops.append(_OPS[o["op"]])
        forwards += o["op"] == "forward"
        # ddpsim says which backward syncs and which forward armed it (PyTorch's arming, schedule.c)
        rearms = rearms or (o["op"] == "backward" and o.get("syncs", False) and o["armed_by"] != forwards - 1)
    opt = m["optimizer"]
    adamw = ({"betas": tuple(opt["betas"]), "eps": opt["eps"], "weight_decay": opt["weight_decay"]}
             if opt.get("type") == "adamw" else None)
    return {"ops": ops, "clips": clips, "ddp": m["ddp"], "lr": opt["lr"], "momentum": opt.get("momentum", 0.0), "adamw": adamw,
            "model": m["model"]["name"],
            "joins": m.get("joins", []), "uneven": m.get("uneven", []), "rearms": rearms,
            "loss_scale": m.get("loss_scale"), "planted": m.get("planted", []), "loss_norm": m.get("loss_norm")}


def skipped_ops(uneven, rank):
    """The ops `rank` does not run: the iterations of each uneven repetition after its own count."""
    out = set()
    for u in uneven:
        out.update(range(u["first"] + u["counts"][rank] * u["body"], u["first"] + u["iterations"] * u["body"]))
    return out


def check(binary, directory, tolerance=None, timeout=None, json_path=None, allow_unsynced_comm=False,
          junit_path=None, html_path=None):
    """ddpsim check DIR: (exit code, the report's text, the JSON report or None); junit_path, html_path: its --junit
    and --html too."""
    args = ["check", directory] + (["--allow-unsynced-comm"] if allow_unsynced_comm else [])
    if tolerance:
        args += ["--tolerance", tolerance]
    if timeout is not None:
        args += ["--timeout", str(timeout)]
    args += ["--json", json_path]
    if junit_path:
        args += ["--junit", junit_path]
    if html_path:
        args += ["--html", html_path]
    p = run(binary, args)
    report = None
    if os.path.exists(json_path) and os.path.getsize(json_path):
        with open(json_path) as f:
            try:
                report = json.load(f)
            except ValueError:
                report = None
    return p.returncode, p.stdout + p.stderr, report
