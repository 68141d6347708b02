"""mwnotebook.course.seed_program, the training program the lessons import (lessons 01, 04, 06, 10), is
the seed script (tests/data/seed_train.py) cut into functions: on the shared two-worker cluster it prints
the script's exact lines, and gives its result back as a value."""

from __future__ import annotations

import pytest

from testbed.seed_cell import expected_line

pytestmark = pytest.mark.tf


def test_the_packaged_seed_program_prints_the_scripts_exact_lines(tf_cluster):
    result = tf_cluster.run("from mwnotebook.course import seed_program\nr = seed_program.main()\n"
                            "print(r.global_batch_size, r.replicas)", timeout=240)
    for i in range(2):
        assert result.stdout(i) == expected_line(i) + "\n32 2\n", result.stdout(i)


def test_outside_a_cluster_it_says_where_it_runs():
    from mwnotebook.course import seed_program
    from mwnotebook.errors import ConfigError

    with pytest.raises(ConfigError, match="run the seed program in a %%mwtrain cell"):
        seed_program.read_task({})
    assert seed_program.read_task({"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:2", "c:3"]}, '
                                                '"task": {"type": "worker", "index": 2}}'}) == seed_program.Task(2, 3)
