"""Every lesson's exercise (its ``## Exercise`` cell) and its solution (notebooks/solutions/NN_solution.ipynb):
each solution is executed once here, in a fresh notebook kernel with nbclient, and its outcome checked,
so a solution that no longer shows what the exercise asks to predict fails. The solutions of the lessons
that need SSH hosts, Slurm or Ray (04, 06, 09b, 10) run on this machine alone: their point (where tasks are
placed, the job's #SBATCH lines, which options are refused) is decided before anything connects."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from testbed.lessons import ROOT, text_of

pytestmark = [pytest.mark.tf, pytest.mark.slow, pytest.mark.timeout(300)]

SOLUTIONS = ROOT / "notebooks" / "solutions"


def run(number: str) -> list[str]:
    """Execute solution ``number``; the text of each code cell's outputs, in order."""
    nb = nbformat.read(SOLUTIONS / f"{number}_solution.ipynb", as_version=4)
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    return [re.sub(r"\x1b\[[0-9;]*m", "", text_of(c) + "".join("\n".join(o.get("traceback", []))
                                                               for o in c.outputs if o.output_type == "error"))
            for c in nb.cells if c.cell_type == "code"]


def lines(text: str) -> set[str]:
    return set(text.splitlines())


def check_01(out: list[str]) -> None:
    for i in range(3):
        assert any(line.startswith(f"[worker {i}] worker={i} replicas=3 ") for line in lines(out[1])), out[1]
        assert f"[worker {i}] worker={i} global_batch=48" in lines(out[1]), out[1]


def check_02(out: list[str]) -> None:
    assert "The `global_batch_size` 64 is not divisible by `num_replicas_in_sync` 3" in out[1], out[1][-2000:]
    for i in range(3):
        found = re.search(rf"^\[worker {i}\] replicas 3 epoch losses: \[([\d., ]+)\]$", out[2], re.M)
        assert found, out[2]
        losses = [float(v) for v in found.group(1).split(",")]
        assert len(losses) == 3 and losses[-1] < losses[0], losses


def check_03(out: list[str]) -> None:
    assert out[2].splitlines() == ["global = mean of the two local losses: False",
                                   "global = 0.75 x worker 0 + 0.25 x worker 1: True"], out[2]


def check_04(out: list[str]) -> None:
    cluster = "['lab1:12345', 'lab1:12346', 'lab2:12345']"
    assert out[2].splitlines() == [f"worker {i}: cluster {cluster}, index {i}" for i in range(3)], out[2]


def check_09b(out: list[str]) -> None:
    tasks = "chief-0 on lab1, worker-0 on lab1, worker-1 on lab2, worker-2 on lab3"
    assert f"each launcher names its host: {tasks}, ps-0 on lab3" in out[1], out[1]
    assert f"each launcher names its host: {tasks}, ps-0 on lab2" in out[2], out[2]


def check_05(out: list[str]) -> None:
    assert out[0].splitlines() == ["global batch 256", "step   0: learning rate 0.001000",
                                   "step  20: learning rate 0.008000", "step  70: learning rate 0.004000",
                                   "step 120: learning rate 0.000000"], out[0]


def check_06(out: list[str]) -> None:
    sbatch = lines(out[2])
    assert {"#SBATCH --ntasks=4", "#SBATCH --ntasks-per-node=2", "#SBATCH -N 2", "#SBATCH -p gpu",
            "#SBATCH -t 01:00:00"} <= sbatch, out[2]


def check_07(out: list[str]) -> None:
    assert {"[worker 0] task chief:0  index == 0: True  mw.is_chief(): True",
            "[worker 1] task worker:0  index == 0: True  mw.is_chief(): False"} <= lines(out[1]), out[1]


def check_08(out: list[str]) -> None:
    for w in range(2):
        verdicts = re.findall(rf"^\[worker {w}\] reshuffle_each_iteration=(\w+): .* identical: (\w+)$", out[2], re.M)
        assert verdicts == [("False", "True"), ("True", "False")], out[2]


def check_09(out: list[str]) -> None:
    assert re.search(r"^\[coordinator\] chief:0 runs the cell; the variables are on \['ps/replica:0/task:0', "
                     r"'ps/replica:0/task:1'\]$", out[1], re.M), out[1]
    assert "[worker" not in out[1], out[1]  # only the coordinator ran the cell
    assert "1 coordinator, 3 worker servers, 2 parameter servers" in out[2], out[2]


def check_10(out: list[str]) -> None:
    verdicts = {line.split("  ")[0].strip(): line for line in out[1].splitlines()}
    assert verdicts["--ray auto --ray-strategy spread"].endswith("accepted"), verdicts
    assert "SPREAD, STRICT_SPREAD, PACK, STRICT_PACK" in verdicts["--ray auto --ray-strategy SPREADX"], verdicts
    assert "--cpus-per-worker must be >= 1" in verdicts["--ray auto --cpus-per-worker 0"], verdicts
    assert "only applies together with --ray" in verdicts["--ray-strategy PACK"], verdicts


def check_11(out: list[str]) -> None:
    assert "[worker 0] step 4" in lines(out[1]) and "[worker 1] step 3" in lines(out[1]), out[1][:2000]
    assert "[worker 1] step 4" not in lines(out[1]), out[1][:2000]
    assert "ClusterTimeoutError" in out[1], out[1][-2000:]
    assert out[2].strip() == "workers [0] wait in a collective for workers [1]", out[2]


def check_12(out: list[str]) -> None:
    results = {name: json.loads(Path(f"/tmp/mwnotebook-exercise-12/result-{name}.json").read_text())
               for name in ("fixed", "scaled")}
    assert results["scaled"]["learning_rate"] == pytest.approx(4 * results["fixed"]["learning_rate"])
    fixed, scaled = results["fixed"]["steps_to_target"], results["scaled"]["steps_to_target"]
    assert fixed is not None and scaled is not None and scaled < fixed, results
    assert len(out[5].splitlines()) == 2, out[5]


def check_13(out: list[str]) -> None:
    assert "options: the same" in out[3], out[3]
    assert "-    per_replica_batch = ctx.get_per_replica_batch_size(64)" in out[3], out[3]
    assert "+    per_replica_batch = ctx.get_per_replica_batch_size(128)" in out[3], out[3]
    ratio = float(re.search(r"ratio ([0-9.]+)", out[4]).group(1))  # type: ignore[union-attr]
    assert 0.8 < ratio < 1.2, out[4]  # twice the examples per step: about the same loss, not half


def check_14(out: list[str]) -> None:
    # prefetch alone: reading a batch (~64 ms) is far longer than a step, so worker 1 is still the slow one
    assert "mwnotebook: worker 1 is the slow worker, input-bound" in out[1], out[1][-2000:]


CHECKS: dict[str, Callable[[list[str]], None]] = {
    "01": check_01, "02": check_02, "03": check_03, "04": check_04, "05": check_05, "06": check_06,
    "07": check_07, "08": check_08, "09": check_09, "09b": check_09b, "10": check_10, "11": check_11, "12": check_12,
    "13": check_13, "14": check_14}


@pytest.mark.parametrize("number", sorted(CHECKS))
def test_solution(number: str) -> None:
    CHECKS[number](run(number))


@pytest.mark.parametrize("number", sorted(CHECKS))
def test_the_lesson_has_its_exercise(number: str) -> None:
    (lesson,) = (ROOT / "notebooks").glob(f"{number}_*.ipynb")
    nb = nbformat.read(lesson, as_version=4)
    exercises = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Exercise")]
    assert len(exercises) == 1, lesson.name
    assert "Predict first" in exercises[0], exercises[0]
    assert f"(solutions/{number}_solution.ipynb)" in exercises[0], exercises[0]
    assert (SOLUTIONS / f"{number}_solution.ipynb").exists()
