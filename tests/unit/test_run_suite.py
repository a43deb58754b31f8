"""How ``make test`` splits the suite (tests/run_suite.py): by module for a whole
run, every module exactly once, and the modules given to ``--ignore`` in none
(pytest runs a module named on its command line even when it is also ignored)."""

from __future__ import annotations

from tests.run_suite import ignored, module_split, whole_suite

LEFT_OUT = ["--ignore=tests/ops/test_up.py", "--ignore", "tests/gateway/views"]


def test_a_whole_run_is_split_by_module_each_once():
    groups = module_split(4)
    modules = [m for group in groups for m in group]
    assert all(groups) and len(modules) == len(set(modules))
    assert "tests/unit/test_run_suite.py" in modules


def test_ignored_modules_and_folders_are_in_no_shard():
    assert whole_suite(LEFT_OUT)  # still the whole suite, less those
    leave_out = ignored(LEFT_OUT)
    assert leave_out == {"tests/ops/test_up.py", "tests/gateway/views"}
    modules = [m for group in module_split(4, leave_out) for m in group]
    assert "tests/ops/test_up.py" not in modules
    assert not [m for m in modules if m.startswith("tests/gateway/views/")]
    assert "tests/ops/test_up_plant.py" in modules and "tests/gateway/test_ws.py" in modules


def test_a_selection_is_left_to_pytest_split():
    assert not whole_suite(["tests/ops"])
    assert not whole_suite(["-k", "plant"])
