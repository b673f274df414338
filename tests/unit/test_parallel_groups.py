"""The parallel run's groups hold: under pytest-xdist's loadgroup, each test carries its group (its
file's, or the Spark or cluster group) to the scheduler, so tests sharing a module's server, the Spark
session or a three-node cluster run on one worker. A pytest that drops the groups silently (9.2 with
pytest-xdist 3.8) would start every module's fixtures on each worker and run clusters side by side."""

import os


def test_under_loadgroup_this_test_carries_its_files_group(request):
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not request.config.getvalue("loadgroup"):
        return  # a serial run has no groups to keep
    assert request.node.nodeid.endswith("@test_parallel_groups.py"), request.node.nodeid
