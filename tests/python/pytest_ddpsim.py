"""tests/python.sh runs these through pytest with -p ddpsim_torch.pytest_plugin and reads the outcomes back
from pytest's own --junitxml: the marker and the fixture pass torch's DDP and fail thunder's no_sync before
PR #2255 with ddpsim's report as the failure's text, and a marked test that returns nothing fails saying why."""
import pytest

import wrappers


@pytest.mark.ddpsim(ranks=2, scenario="classic")
def test_marker_ddp():
    return "torch.nn.parallel:DistributedDataParallel"


@pytest.mark.ddpsim(ranks=2, scenario="classic")
def test_marker_sync_on_exit():
    return wrappers.thunder_sync_on_exit


def test_fixture_ddp(ddpsim):
    result = ddpsim.check(wrappers.hook_ddp, ranks=2, scenario="classic")
    assert result.passed and len(result.grabs) == 8 * 2


def test_fixture_sync_on_exit(ddpsim):
    ddpsim.check(wrappers.thunder_sync_on_exit, ranks=2, scenario="classic")


@pytest.mark.ddpsim(ranks=2)
def test_marker_returns_nothing():
    pass
