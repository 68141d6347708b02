"""The xdist groups' order (tests/_plugins/run_groups.py): the longest measured group first, each
group's tests together and in their order, the suite's order kept without a measured run; and the
clock that measures a run's groups and processes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests._plugins.run_groups import TESTS, GroupClock, load_durations, longest_first


@dataclass
class Item:
    fspath: Path
    name: str


def items(*names: str) -> list[Item]:
    """``ray/test_a.py::t1`` -> an item of that module of tests/."""
    return [Item(TESTS / name.split("::")[0], name.split("::")[1]) for name in names]


SUITE = items("browser/test_x.py::a", "ray/test_a.py::b", "unit/test_u.py::c", "ray/test_b.py::d",
              "unit/test_u.py::e", "tf/test_lesson.py::f", "unit/test_v.py::g")


def test_without_a_measured_run_the_suite_order_is_kept() -> None:
    assert [i.name for i in longest_first(SUITE, {})] == [i.name for i in SUITE]


def test_the_longest_measured_group_goes_first_with_its_tests_in_order() -> None:
    measured = {"ray": 900.0, "tf/test_lesson.py": 60.0, "browser/test_x.py": 60.0, "unit/test_u.py": 1.0}
    # unit/test_v.py was not measured: 2 s per test, between the lesson and test_u
    assert [i.name for i in longest_first(SUITE, measured)] == ["b", "d", "a", "f", "g", "c", "e"]


def test_the_clock_sums_groups_and_processes_and_the_order_reads_its_file(tmp_path: Path) -> None:
    clock = GroupClock(TESTS.parent)
    clock.add("tests/ray/test_a.py::b", 30.0, "gw0")
    clock.add("tests/ray/test_b.py::d", 12.5, "gw0")
    clock.add("tests/unit/test_u.py::c", 0.25, "gw1")
    clock.add("elsewhere/test_z.py::z", 5.0, "gw1")  # not under tests/: not counted
    clock.write(tmp_path / "artifacts" / "group_durations.json")
    written = json.loads((tmp_path / "artifacts" / "group_durations.json").read_text())
    assert written["groups"] == {"ray": 42.5, "unit/test_u.py": 0.2}
    assert written["processes"] == {"gw0": 42.5, "gw1": 0.2}
    assert set(written["processes_last_report_s"]) == {"gw0", "gw1"}
    assert load_durations(tmp_path / "artifacts" / "group_durations.json") == {"ray": 42.5, "unit/test_u.py": 0.2}
    assert load_durations(tmp_path / "none.json") == {}
