"""The front end's report where CI reads it (ddpsim's sim/junit.c and sim/annotate.c say the same of a C run):
JUnit XML in pytest's xunit2 layout, and GitHub Actions annotations. The facts of a failure are ddpsim check's
own: each scenario's check wrote its JUnit document (a testcase per check), and a scenario's testcase here
carries its first failing check's <failure> as ddpsim wrote it, with the front end's replay line."""
import copy
import datetime
import html
import inspect
import os
import re
import socket
import xml.etree.ElementTree as ET

from . import loading


def read_check_junit(path):
    """The <testsuites> element ddpsim check wrote to path, or None (no document: the check gave no verdict)."""
    try:
        return ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None


def read_text(path):
    """A file's text, or None (not written: the check gave no verdict)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def wrapper_location(wrap):
    """(file, line) of the user's wrapper, relative to the working directory when below it: the no_sync of the
    class the wrap function builds (the one class it names that has a no_sync, inherited or not; or the wrap
    itself when it is a class), where a synchronization bug usually is; else the wrap function itself; None
    when the source cannot be found (a built-in, a C extension)."""
    try:
        fn = loading.load(wrap, "--wrap") if isinstance(wrap, str) else wrap
        target = fn
        if inspect.isclass(fn):
            classes = [fn]
        else:
            named = [getattr(fn, "__globals__", {}).get(n) for n in getattr(fn, "__code__", None).co_names]
            classes = [c for c in named if inspect.isclass(c) and callable(getattr(c, "no_sync", None))]
        if len(classes) == 1 and callable(getattr(classes[0], "no_sync", None)):
            target = classes[0].no_sync
        target = inspect.unwrap(target)
        path = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
    except (loading.BadInput, TypeError, OSError, AttributeError):
        return None
    if not path:
        return None
    rel = os.path.relpath(path)
    return (rel if not rel.startswith("..") else path), line


def _replay_text(text, replay):
    """A failure's text with its replay line (ddpsim check's, of a temporary recording) made the front end's."""
    lines = [line for line in (text or "").split("\n") if not line.startswith("replay: ")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines + ["replay: " + replay, ""])


def _first_failure(result):
    """ddpsim check's first <failure> of result's scenario, or None."""
    doc = getattr(result, "junit", None)
    if doc is None:
        return None
    return doc.find("./testsuite/testcase/failure")


def _outcome(result):
    """(kind, type, message) of a scenario's testcase: kind pass, failure or skipped."""
    if result.exit_code == 0:
        return "pass", None, None
    if result.exit_code == 4:
        return "skipped", None, "nothing verified: every grab compared only zeros"
    kind = {1: "divergence", 2: "bad_input", 3: "fault"}.get(result.exit_code, "fault")
    theirs = _first_failure(result) if result.exit_code == 1 else None
    if theirs is not None and theirs.get("message"):  # ddpsim's one line for it (judge_summary)
        return "failure", kind, theirs.get("message")
    return "failure", kind, result.first_divergence_text() or result.message or result.verdict


def _testcase(suite, name, result, replay):
    case = ET.SubElement(suite, "testcase", classname="ddpsim_torch", name=name)
    kind, ftype, message = _outcome(result)
    if kind == "skipped":
        ET.SubElement(case, "skipped", message=message)
    elif kind == "failure":
        theirs = _first_failure(result) if result.exit_code == 1 else None
        if theirs is not None:  # ddpsim check's own words and facts
            f = copy.deepcopy(theirs)
            f.text = _replay_text(f.text, replay)
        else:
            f = ET.Element("failure", type=ftype, message=message)
            f.text = _replay_text(message, replay)
        case.append(f)
        ET.SubElement(case, "system-out").text = "replay: " + replay
    return kind


def _properties(suite, result, extra):
    props = ET.SubElement(suite, "properties")
    for name, value in extra:
        ET.SubElement(props, "property", name=name, value=str(value))
    return props


def write_junit(result, path, command, left_out=()):
    """result (a battery's, with .scenarios, or one scenario's) as one <testsuite> at path. left_out: (name, why)
    of the battery's scenarios not run, each a skipped testcase."""
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="ddpsim_torch")
    verdict = next((line[len("# verdict: "):] for line in result.report.splitlines()
                    if line.startswith("# verdict: ")), result.verdict)
    props = _properties(suite, result, [("command", command), ("verdict", verdict)])
    counts = {"pass": 0, "failure": 0, "skipped": 0}
    if result.scenarios:
        first = None
        for r in result.scenarios:
            replay = command + " --scenario " + r.name
            kind = _testcase(suite, r.name, r, replay)
            counts[kind] += 1
            if kind == "failure" and first is None:
                first = r
        for name, why in left_out:
            case = ET.SubElement(suite, "testcase", classname="ddpsim_torch", name=name)
            ET.SubElement(case, "skipped", message="not run: " + why)
            counts["skipped"] += 1
        if first is not None:
            ET.SubElement(props, "property", name="first_failure", value=first.name)
            theirs = getattr(first, "junit", None)
            for p in (theirs.findall("./testsuite/properties/property") if theirs is not None else ()):
                if p.get("name") in ("check", "rank", "parameter", "element", "expected", "actual", "ulps",
                                     "pattern"):
                    props.append(copy.deepcopy(p))
    else:  # one scenario: ddpsim check's testcases, one per check, with the front end's replay line
        theirs = getattr(result, "junit", None)
        cases = theirs.findall("./testsuite/testcase") if theirs is not None else []
        if cases and result.exit_code in (0, 1, 4):
            for p in theirs.findall("./testsuite/properties/property"):
                if p.get("name") not in ("command", "verdict"):
                    props.append(copy.deepcopy(p))
            for c in cases:
                c = copy.deepcopy(c)
                c.set("classname", "ddpsim_torch")
                for f in c.findall("failure"):
                    f.text = _replay_text(f.text, command)
                for o in c.findall("system-out"):
                    o.text = "replay: " + command
                suite.append(c)
                kind = "failure" if c.find("failure") is not None else (
                    "skipped" if c.find("skipped") is not None else "pass")
                counts[kind] += 1
        else:  # no verdict: bad input or a fault, said as one failing testcase
            counts[_testcase(suite, result.name or "run", result, command)] += 1
    suite.set("tests", str(sum(counts.values())))
    suite.set("failures", str(counts["failure"]))
    suite.set("errors", "0")
    suite.set("skipped", str(counts["skipped"]))
    suite.set("time", "%.3f" % sum(result.timing.get(k, 0.0) for k in ("ranks_s", "check_s")))
    suite.set("timestamp", datetime.datetime.now().strftime("%Y-%m-%dT%H:%M:%S"))
    suite.set("hostname", socket.gethostname() or "localhost")
    if hasattr(ET, "indent"):  # Python >= 3.9: a document a person can read too
        ET.indent(suites)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def annotations_on(mode):
    """--annotations: 'github', or 'auto' with GITHUB_ACTIONS=true in the environment."""
    if mode != "auto":
        return mode == "github"
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _escape(text, prop):
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def annotation(kind, title, text, where=None):
    """One workflow command line: ::error file=F,line=L,title=T::TEXT (GitHub's escaping)."""
    props = []
    if where:
        props += ["file=" + _escape(where[0], True), "line=%d" % where[1]]
    props.append("title=" + _escape(title, True))
    return "::%s %s::%s\n" % (kind, ",".join(props), _escape(text, False))


def annotations(result, command, where=None):
    """The lines: an ::error per failing scenario (at the wrapper's no_sync or wrap function when where is
    known), an ::notice with the verdict."""
    out = []
    verdict = next((line[len("# verdict: "):] for line in result.report.splitlines()
                    if line.startswith("# verdict: ")), result.verdict)
    for r in (result.scenarios or [result]):
        kind, _, message = _outcome(r)
        if kind != "failure":
            continue
        name = r.name if result.scenarios else None
        replay = command + (" --scenario " + r.name if name else "")
        out.append(annotation("error", "ddpsim: %s%s" % ("scenario %s " % name if name else "", r.verdict),
                              "%s\nreplay: %s" % (message, replay), where))
    out.append(annotation("notice", "ddpsim verdict", verdict))
    return "".join(out)


_SECTION = re.compile(r'<section class="run" id="run-1".*?</section>\n', re.S)
_STYLE = re.compile(r"<style>.*?</style>", re.S)
_SCRIPT = re.compile(r"<script>.*?</script>", re.S)
_LEGEND = re.compile(r'<p class="legend">.*?</p>\n', re.S)


def _esc(text):
    return html.escape(str(text), quote=True)


def write_html(result, path, command):
    """result as one self-contained page at path, made of ddpsim check's own pages (Result.html, each scenario's):
    its heatmaps, schedule strips and first divergences, under the front end's header and, for a battery, a table
    of the scenarios linking to each."""
    runs = result.scenarios or [result]
    pages = [getattr(r, "html", None) for r in runs]
    model_page = next((p for p in pages if p), None)
    style = _STYLE.search(model_page).group(0) if model_page else "<style></style>"
    script = _SCRIPT.search(model_page).group(0) if model_page else ""
    legend = _LEGEND.search(model_page) if model_page else None
    verdict = next((line[len("# verdict: "):] for line in result.report.splitlines()
                    if line.startswith("# verdict: ")), result.verdict)
    word = "pass" if result.passed else "fail"
    out = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>ddpsim_torch: %s</title>%s</head>\n'
           '<body>\n<h1>ddpsim_torch: <span class="v-%s">%s</span></h1>\n<table class="facts">\n' % (
               _esc(verdict), style, word, _esc(verdict))]
    for name, value in (("command", command), ("verdict", verdict)):
        out.append("<tr><td>%s</td><td>%s</td></tr>\n" % (_esc(name), _esc(value)))
    out.append("</table>\n" + (legend.group(0) if legend else ""))
    if result.scenarios:
        out.append('<table class="scenarios"><thead><tr><th>scenario</th><th>verdict</th><th>first divergence</th>'
                   '</tr></thead><tbody>\n')
        for k, r in enumerate(runs, 1):
            out.append('<tr><td><a href="#run-%d">%s</a></td><td class="verdict v-%s">%s</td><td>%s</td></tr>\n' % (
                k, _esc(r.name), "pass" if r.passed else "fail", _esc(r.verdict),
                "" if r.passed else _esc(_outcome(r)[2])))
        for name, why in result.left_out:
            out.append("<tr><td>%s</td><td>not run</td><td>%s</td></tr>\n" % (_esc(name), _esc(why)))
        out.append("</tbody></table>\n")
    for k, (r, page) in enumerate(zip(runs, pages), 1):
        m = _SECTION.search(page) if page else None
        if m is None:  # no verdict, no page: the fault or the bad input
            out.append('<section class="run" id="run-%d" data-verdict="%s">\n<h2>%s: <span class="verdict v-fail">%s'
                       '</span></h2>\n<p class="summary">%s</p>\n</section>\n' % (
                           k, _esc(r.verdict), _esc(r.name or "the run"), _esc(r.verdict),
                           _esc(_outcome(r)[2] or "")))
            continue
        section = m.group(0).replace('id="run-1"', 'id="run-%d"' % k).replace('id="first-1"', 'id="first-%d"' % k)
        out.append(section.replace("<h2>the run:", "<h2>%s:" % _esc(r.name or "the run"), 1))
    out.append("%s\n</body></html>\n" % script)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(out))
