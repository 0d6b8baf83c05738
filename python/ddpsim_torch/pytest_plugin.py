"""ddpsim_torch's pytest plugin: a DDP check as a pytest test, its verdict the test's outcome.

Enable it with `pytest -p ddpsim_torch.pytest_plugin`, or `pytest_plugins = ["ddpsim_torch.pytest_plugin"]` in a
conftest.py. Then either

    @pytest.mark.ddpsim(ranks=3, scenario="classic")
    def test_my_ddp():
        return my_wrap                  # a wrap function defined at a module's top level (or "MODULE:FUNC")

or

    def test_my_ddp(ddpsim):
        result = ddpsim.check(my_wrap, ranks=3)   # ddpsim_torch.check()'s arguments

The marker's (or check()'s) arguments are ddpsim_torch.check()'s. A verdict other than PASS fails the test with
ddpsim's report as the failure's text (NOTHING VERIFIED too: a test that verified nothing did not pass). The ranks
are forked processes on gloo over the loopback device, as check() runs them from any program. Under pytest
--junitxml, a failing check's facts (verdict, check, rank, parameter, element, ulps, the replay line) go in the
testcase's properties with junit_family=xunit1 or legacy; the xunit2 layout (pytest's default) has no properties
in a testcase, so there they are the failure text's (ddpsim's report) alone. --ddpsim-junit-dir DIR also writes
each check's own JUnit document (Result.write_junit) as DIR/<test>.xml, and --ddpsim-html-dir DIR its HTML page
(check(html=...)) as DIR/<test>.html, whose path a failure's text ends with (and ddpsim_html, under xunit1)."""
import os
import re

import pytest

from . import api


def pytest_addoption(parser):
    parser.addoption("--ddpsim-junit-dir", metavar="DIR", default=None,
                     help="ddpsim_torch: write each check's JUnit XML (a testcase per scenario or check) into DIR")
    parser.addoption("--ddpsim-html-dir", metavar="DIR", default=None,
                     help="ddpsim_torch: write each check's HTML report into DIR (its path in the failure's text)")


def pytest_configure(config):
    config.addinivalue_line("markers", "ddpsim(**check_args): the test returns a DDP wrap function; "
                                       "ddpsim_torch.check(wrap, **check_args) judges it and its verdict is the "
                                       "test's")


def _facts(result):
    """(name, value) pairs of a failing result's first divergence, for the testcase's properties."""
    r = result
    if r.scenarios:
        failing = [s for s in r.scenarios if not s.passed]
        r = failing[0] if failing else r
    out = [("ddpsim_verdict", result.verdict)]
    if r is not result and r.name:
        out.append(("ddpsim_scenario", r.name))
    fd = r.first_divergence or {}
    for key, name in (("check", "ddpsim_check"), ("rank", "ddpsim_rank"), ("param", "ddpsim_parameter"),
                      ("index", "ddpsim_element"), ("expected", "ddpsim_expected"), ("actual", "ddpsim_actual"),
                      ("ulp", "ddpsim_ulps")):
        if fd.get(key) is not None:
            out.append((name, fd[key]))
    if result.command:
        out.append(("ddpsim_replay", result.command + (" --scenario " + r.name if r is not result else "")))
    return out


def _node_file(item, directory, suffix):
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, re.sub(r"[^A-Za-z0-9_.-]", "_", item.nodeid) + suffix)


def _check(item, wrap, check_args):
    """ddpsim_torch.check(), with its HTML page under --ddpsim-html-dir."""
    html_dir = item.config.getoption("--ddpsim-html-dir")
    if html_dir and "html" not in check_args:
        check_args = dict(check_args, html=_node_file(item, html_dir, ".html"))
    result = api.check(wrap, **check_args)
    result.html_path = check_args.get("html")
    return result


def _judge(item, result):
    """The test's outcome from the check's: pass, or fail with ddpsim's report (and where its page is)."""
    junit_dir = item.config.getoption("--ddpsim-junit-dir")
    if junit_dir:
        result.write_junit(_node_file(item, junit_dir, ".xml"))
    page = getattr(result, "html_path", None)
    if result.passed:
        return result
    if item.config.getini("junit_family") in ("xunit1", "legacy"):
        item.user_properties.extend(_facts(result) + ([("ddpsim_html", page)] if page else []))
    first = next((line[2:] for line in result.report.splitlines() if line.startswith("# verdict: ")), "") \
        if result.scenarios else result.first_divergence_text()
    pytest.fail("ddpsim_torch: %s: %s\n%s%s" % (result.verdict, first, result.report,
                                                 "# html report: %s\n" % page if page else ""), pytrace=False)


class Ddpsim:
    """The ddpsim fixture: check(wrap, **check_args) runs ddpsim_torch.check() and fails the test unless it
    passes; returns the Result."""

    def __init__(self, item):
        self._item = item

    def check(self, wrap, **check_args):
        return _judge(self._item, _check(self._item, wrap, check_args))


@pytest.fixture
def ddpsim(request):
    return Ddpsim(request.node)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    marker = pyfuncitem.get_closest_marker("ddpsim")
    if marker is None:
        return None
    if marker.args:
        raise pytest.UsageError("@pytest.mark.ddpsim takes ddpsim_torch.check()'s keyword arguments (ranks=3, "
                                "scenario='classic', ...), not %r" % (marker.args,))
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    wrap = pyfuncitem.obj(**args)
    if wrap is None:
        pytest.fail("@pytest.mark.ddpsim: the test returned nothing; it must return the DDP wrap function (defined "
                    "at a module's top level) or 'MODULE:FUNC'", pytrace=False)
    _judge(pyfuncitem, _check(pyfuncitem, wrap, marker.kwargs))
    return True
