"""check() as a framework's own test calls it (a pytest test would be these
lines in a test function): the verdict, the first divergence and the
per-grab table of the Result. A script, unlike a pytest module, needs the
__main__ guard: the rank processes are spawned and import it."""
import ddpsim_torch
from ddpsim_torch import check

import wrappers


def main():
    ok = check(wrappers.hook_ddp, ranks=2, scenario="classic")
    assert ok.passed and ok.verdict == "PASS" and ok.exit_code == 0, ok.report
    assert len(ok.grabs) == 8 * 2 and all(g["match"] for g in ok.grabs), ok.grabs
    assert ok.first_divergence is None

    bad = check(wrappers.thunder_sync_on_exit, ranks=2, scenario="classic")
    assert not bad.passed and bad.verdict == "FAIL" and bad.exit_code == 1, bad.report
    fd = bad.first_divergence
    assert (fd["check"], fd["rank"], fd["param"], fd["index"]) == ("grab 0", 0, "0.weight", 0), fd
    assert fd["expected"] != fd["actual"], fd
    assert not bad.grabs[0]["match"] and "grab 0 (after no_sync fwd+bwd)" in repr(bad), repr(bad)

    battery = check("torch.nn.parallel:DistributedDataParallel", ranks=2)
    assert battery.passed and len(battery.scenarios) == 23, battery.report

    local = check(lambda m: m, ranks=2, scenario="classic")  # not importable by the rank processes
    assert local.exit_code == 2 and "top level" in local.message, local.report

    assert ddpsim_torch.__version__
    print("api_check: ok")


if __name__ == "__main__":
    main()
