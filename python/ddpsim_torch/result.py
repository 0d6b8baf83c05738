"""The result of a check: what `ddpsim check` said, for a program."""

VERDICTS = {0: "PASS", 1: "FAIL", 2: "BAD INPUT", 3: "FAULT", 4: "NOTHING VERIFIED"}


class Result:
    """verdict ('PASS', 'FAIL', 'BAD INPUT', 'FAULT', 'NOTHING VERIFIED') and exit_code (0, 1, 2, 3, 4);
    passed; first_divergence (a dict: check, kind, rank, param, index, expected, actual, ulp; or None);
    checks (every check on every rank: check, kind, label, synced, rank, max_abs_diff, max_ulp, match);
    grabs (the gradient checks alone); report (the text ddpsim prints); message (why, for a fault or bad
    input); json (ddpsim check's JSON report); scenarios (a battery's per-scenario Results); name;
    record_dir (when kept); timing (seconds: ranks_s, shadow_s, record_s, check_s); command (the line that
    replays it); write_junit(path)."""

    def __init__(self, exit_code, report="", message=None, json=None, name=None, record_dir=None, scenarios=()):
        self.exit_code = exit_code
        self.verdict = VERDICTS.get(exit_code, "FAULT")
        self.report = report
        self.message = message
        self.json = json
        self.name = name
        self.record_dir = record_dir
        self.scenarios = list(scenarios)
        self.first_divergence = (json or {}).get("first_divergence")
        self.checks = list((json or {}).get("checks", []))
        self.grabs = [c for c in self.checks if c.get("kind") == "gradients"]
        self.timing = {}
        self.junit = None  # ddpsim check's JUnit document (ci.read_check_junit), when it wrote one
        self.html = None  # ddpsim check's HTML page (its text), when check(html=...) asked for one
        self.left_out = []  # a battery's scenarios not run: (name, why)
        self.command = None  # the command line that replays the check

    @property
    def passed(self):
        return self.exit_code == 0

    @classmethod
    def failed(cls, code, verdict, message, header="", command=None):
        replay = "# replay: %s\n" % command if command else ""
        return cls(code, header + "# verdict: %s: %s\n%s" % (verdict, message, replay), message=message)

    @classmethod
    def from_check(cls, name, code, text, json, record_dir):
        message = None
        if code in (2, 3):
            message = text.strip().splitlines()[-1] if text.strip() else "ddpsim check exited %d" % code
        return cls(code, text, message=message, json=json, name=name, record_dir=record_dir)

    def first_divergence_text(self):
        for line in self.report.splitlines():
            if line.startswith("# first divergence: ") or line.startswith("# ranks disagree: "):
                return line[2:]
        return self.message or ""

    def write_junit(self, path):
        """This result as JUnit XML (pytest's xunit2 layout) at path: a testcase per scenario of a battery, or per
        check of one scenario, the failures in ddpsim check's words (ci.py)."""
        from . import ci
        ci.write_junit(self, path, self.command or "python3 -m ddpsim_torch", self.left_out)

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return "<ddpsim_torch.Result %s%s%s>" % (self.verdict, " " + self.name if self.name else "",
                                                 ": " + self.first_divergence_text() if not self.passed else "")


def _checks_held(r, kind):
    """'held/checked' of one kind of check (gradients at grabs, parameters after steps): a check holds when it
    matched on every rank; '-' when the scenario reached no verdict."""
    by_check = {}
    for c in r.checks:
        if c.get("kind") == kind:
            by_check[c["check"]] = by_check.get(c["check"], True) and bool(c.get("match"))
    return "%d/%d" % (sum(by_check.values()), len(by_check)) if by_check else "-"


def battery_result(results, header, left_out=()):
    """One Result for every scenario's: a row each, with how many of its grabs and of its parameter checks held
    on every rank, and the worst verdict (bad input, fail, fault, nothing); left_out names the battery's
    scenarios not run (the header says why)."""
    rows = [header, "#%-16s %-17s %-6s %-6s %s\n" % ("scenario", "verdict", "grabs", "params", "first divergence")]
    for r in results:
        rows.append(" %-16s %-17s %-6s %-6s %s\n" % (r.name, r.verdict, _checks_held(r, "gradients"),
                                                      _checks_held(r, "parameters"),
                                                      "" if r.passed else r.first_divergence_text()))
    codes = [r.exit_code for r in results]
    code = next((c for c in (2, 1, 3, 4) if c in codes), 0)
    passed = codes.count(0)
    if code == 0:
        rows.append("# verdict: PASS (%d of %d scenarios%s)\n" % (
            passed, len(results), "; not run, the header says why: " + ", ".join(left_out) if left_out else ""))
    else:
        # every scenario that did not pass, by its outcome, the worst first: a FAIL must not hide a FAULT
        groups = ["%s: %s" % (VERDICTS[c], ", ".join(r.name for r in results if r.exit_code == c))
                  for c in (2, 1, 3, 4) if c in codes]
        rows.append("# verdict: %s (%d of %d scenarios pass; %s)\n" % (
            VERDICTS[code], passed, len(results), "; ".join(groups)))
    return Result(code, "".join(rows), json=None, name="battery", scenarios=results)
