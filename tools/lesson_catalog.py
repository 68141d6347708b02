"""What the repository knows about each lesson (notebooks/NN_name.ipynb), written once.

For every lesson: the test that executes it and saves ``artifacts/NAME.executed.ipynb``
(testbed/lessons.py), what it needs to run, and the facts of the learning path in
notebooks/README.md: the concept, the lessons to read first, the minutes, and the key result (a
pattern over the executed copy's output text and the sentence its numbers go into).
Read by tools/refresh_lessons.py (runs the tests, commits the copies, writes the path table),
tools/docs_lessons.py (the docs' lesson pages) and tests/docs/test_executed_lessons.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
#: the committed executed copies (notebooks/executed/NAME.ipynb) and their thumbnails (thumbs/NAME.png)
EXECUTED = NOTEBOOKS / "executed"
THUMBS = EXECUTED / "thumbs"
#: where the lesson tests save their executed copies
ARTIFACTS = ROOT / "artifacts"

LOCAL, SSH, SLURM, RAY = "this machine", "SSH hosts", "Slurm", "Ray"
#: what a lesson needs beyond this machine -> the suite's test hosts that provide it (root only)
TEST_HOSTS = {SSH: "tests/remote (SSH hosts in network namespaces)", SLURM: "tests/slurm (a Slurm cluster)",
              RAY: "tests/ray (a Ray cluster)"}


@dataclass(frozen=True)
class Result:
    """A lesson's key result: ``pattern`` (searched in the executed copy's output text, multiline) and
    ``sentence`` (a format string over the pattern's named groups)."""

    pattern: str
    sentence: str

    def render(self, name: str, text: str) -> str:
        found = re.search(self.pattern, text, re.M)
        if found is None:
            raise LookupError(f"{name}: its key result ({self.pattern!r}) is not in the executed copy's output; "
                              "the lesson's output changed: fix the pattern in tools/lesson_catalog.py")
        return self.sentence.format(**found.groupdict())


@dataclass(frozen=True)
class Lesson:
    name: str
    #: the pytest node (file or test) that executes the lesson and saves artifacts/NAME.executed.ipynb
    test: str
    concept: str
    #: lesson numbers to read first
    after: tuple[str, ...]
    #: where its workers run: LOCAL, or LOCAL plus SSH / SLURM / RAY
    needs: tuple[str, ...]
    minutes: int
    result: Result

    @property
    def number(self) -> str:
        return self.name.split("_", 1)[0]

    @property
    def test_hosts(self) -> list[str]:
        """The suite's test hosts its test needs (root): empty for a lesson that runs on this machine alone."""
        return [TEST_HOSTS[n] for n in self.needs if n in TEST_HOSTS]


_FLOAT = r"[0-9]+\.[0-9]+"

LESSONS = (
    Lesson("01_seed_two_workers", "tests/tf/test_core_tf.py::test_seed_notebook_prints_the_seeds_exact_lines",
           "TensorFlow's two-worker custom-loop program (`MultiWorkerMirroredStrategy`) from one cell: "
           "`TF_CONFIG` per worker, labelled output", (), (LOCAL,), 10,
           Result(rf"^\[worker 0\] worker=0 replicas=(?P<replicas>\d+) initial_loss=(?P<first>{_FLOAT}) "
                  rf"final_loss=(?P<last>{_FLOAT}) final_accuracy=(?P<accuracy>{_FLOAT})",
                  "both workers print `replicas={replicas}`, loss {first} → {last}, accuracy {accuracy}")),
    Lesson("02_keras_fit_live_curves",
           "tests/tf/test_reporting.py::test_lesson_notebook_runs_and_saves_a_static_chart"
           "[02_keras_fit_live_curves.ipynb-100]",
           "live loss curves for `model.fit`: each worker's local loss and the global loss", ("01",), (LOCAL,), 10,
           Result(rf"^\[worker 0\] epoch losses: \[(?P<first>{_FLOAT}), .*?(?P<last>{_FLOAT})\]",
                  "epoch loss {first} → {last}; the global curve equals Keras' loss")),
    Lesson("03_custom_loop_live_curves",
           "tests/tf/test_reporting.py::test_lesson_notebook_runs_and_saves_a_static_chart"
           "[03_custom_loop_live_curves.ipynb-200]",
           "`mw.report` in a custom loop: `loss=` per worker, `global_loss=` reduced", ("01", "02"), (LOCAL,), 10,
           Result(rf"^\[worker 0\] final global loss (?P<loss>{_FLOAT})",
                  "final global loss {loss}, the mean of the two local losses at every step")),
    Lesson("04_remote_hosts", "tests/remote/test_remote_notebook.py::test_remote_hosts_notebook",
           "workers on other machines over SSH (`--hosts`)", ("01",), (LOCAL, SSH), 15,
           Result(rf"^\[worker 0\] worker=0 replicas=(?P<replicas>\d+) initial_loss=(?P<first>{_FLOAT}) "
                  rf"final_loss=(?P<last>{_FLOAT})",
                  "the same result lines as on this machine: `replicas={replicas}`, loss {first} → {last}")),
    Lesson("05_performance_recipes", "tests/tf/test_recipes_tf.py::test_notebook_05_runs_and_shows_each_recipe",
           "one device first: input pipeline, mixed precision, XLA, batch size and learning-rate scaling",
           ("01", "03"), (LOCAL,), 20,
           Result(r"^plain  : input wait (?P<plain>[0-9.]+%)[\s\S]*?^builder: input wait (?P<builder>[0-9.]+%)"
                  r"[\s\S]*?^\[worker 0\] epoch losses \[(?P<first>[0-9.]+), .*?(?P<last>[0-9.]+)\] "
                  r"accuracy (?P<accuracy>[0-9.]+)",
                  "input wait {plain} of a step with a plain pipeline, {builder} with the recipe's; two workers "
                  "with every recipe: epoch loss {first} → {last}, accuracy {accuracy}")),
    Lesson("06_laptop_ssh_slurm", "tests/slurm/test_slurm_frontends.py",
           "a scheduler picks the machines (`--slurm`): the allocation and its job, the same cell as a batch "
           "job (`--export DIR --format slurm`)", ("01", "04"), (LOCAL, SLURM), 15,
           Result(rf"^\[worker 0\] worker=0 replicas=(?P<replicas>\d+) initial_loss=(?P<first>{_FLOAT}) "
                  rf"final_loss=(?P<last>{_FLOAT})[\s\S]*?^mwnotebook: Slurm job \d+ \((?P<state>\w+)\)"
                  r"[\s\S]*?^(?P<ntasks>#SBATCH --ntasks=\d+)",
                  "lesson 01's line on two Slurm nodes (`replicas={replicas}`, loss {first} → {last}), the job "
                  "{state} in the status; the exported batch job's `{ntasks}`")),
    Lesson("07_official_tutorial_flows", "tests/tf/test_tutorial_flows.py",
           "the chief saves, the notebook loads and evaluates; `BackupAndRestore` resumes", ("01", "02"),
           (LOCAL,), 15,
           Result(rf"trained: accuracy (?P<trained>{_FLOAT})[\s\S]*?^SavedModel loaded in the notebook: "
                  rf"accuracy (?P<loaded>{_FLOAT})[\s\S]*?"
                  r"^\[worker 0\] epochs run in this cell: \[(?P<epochs>[^\]]*)\]",
                  "trained to accuracy {trained}, the chief's SavedModel evaluates at {loaded} in the notebook; "
                  "the preempted fit's rerun trains epochs [{epochs}] only")),
    Lesson("08_preemption_and_recovery", "tests/tf/test_lesson_08.py",
           "`--max-restarts`: two workers killed, the run resumes from its checkpoints", ("02", "07"), (LOCAL,), 15,
           Result(rf"^worker 0: preempted 2x final loss (?P<loss>{_FLOAT}) accuracy (?P<accuracy>{_FLOAT})"
                  r"[\s\S]*?^identical: (?P<same>\w+)",
                  "two workers killed (epochs 3 and 6), two restarts; final loss {loss}, accuracy {accuracy}, "
                  "identical to the undisturbed run: {same}")),
    Lesson("09_parameter_server_training", "tests/tf/test_ps_lesson.py",
           "one model two ways: all-reduce with a chief, then parameter servers (`--ps`)", ("02", "03"),
           (LOCAL,), 20,
           Result(rf"chief=True mwms_loss (?P<a>{_FLOAT}) -> (?P<b>{_FLOAT})[\s\S]*?"
                  rf"chief ps_loss (?P<first>{_FLOAT}) -> (?P<last>{_FLOAT})",
                  "all-reduce with a chief: loss {a} → {b}; parameter servers: {first} → {last}")),
    Lesson("09b_parameter_servers_on_lab_machines",
           "tests/remote/test_remote_notebook.py::test_parameter_servers_on_lab_machines_notebook",
           "lesson 09's parameter-server cluster on two machines over SSH: which task runs where, `--place`",
           ("04", "09"), (LOCAL, SSH), 10,
           Result(r"^\[coordinator\] loss by epoch: (?P<first>[0-9.]+) .* (?P<last>[0-9.]+)$[\s\S]*?"
                  r"^\[coordinator\] worker server 0 at \S+: (?P<w0>\d+) of 40 jobs\n"
                  r"\[coordinator\] worker server 1 at \S+: (?P<w1>\d+) of 40 jobs",
                  "the coordinator and worker server 0 on the first machine, the parameter server on the second: "
                  "loss {first} → {last} by epoch; the worker servers ran {w0} and {w1} of 40 jobs")),
    Lesson("10_ray_cluster", "tests/ray/test_ray_lesson.py",
           "Ray places the workers (`--ray`): the placement group, a bundle per worker and its node; a request "
           "the cluster cannot hold", ("01", "06"), (LOCAL, RAY), 15,
           Result(rf"^\[worker 0\] worker=0 replicas=(?P<replicas>\d+) initial_loss=(?P<first>{_FLOAT}) "
                  rf"final_loss=(?P<last>{_FLOAT})[\s\S]*?"
                  r"^placement group: strategy (?P<strategy>\w+), state (?P<state>\w+)",
                  "lesson 01's line on Ray (`replicas={replicas}`, loss {first} → {last}); one placement group, "
                  "{strategy} and {state}, a bundle per worker on its own node; 64 CPUs per worker refused at once")),
    Lesson("11_a_hang_and_how_to_find_it", "tests/tf/test_lesson_11.py",
           "a collective on one worker only hangs: `%mwcluster stacks` finds it, `--timeout` bounds it",
           ("01", "03"), (LOCAL,), 10,
           Result(r"(?P<line>workers \[0\] wait in a collective for workers \[1\])",
                  "the stacks say `{line}`; `--timeout 20` turns the hang into `ClusterTimeoutError`")),
    Lesson("12_speedup_and_workers", "tests/tf/test_lesson_12.py",
           "speed-up against the number of workers: steps/s and time to accuracy for 1, 2, 4 workers",
           ("01", "05"), (LOCAL,), 10,
           Result(r"^\s+2\s+512\s+[0-9.]+\s+[0-9]+\s+(?P<two>[0-9.]+)x[\s\S]*?"
                  r"^\s+4\s+1024\s+[0-9.]+\s+[0-9]+\s+(?P<four>[0-9.]+)x[\s\S]*?^this machine: (?P<cores>\d+) cores",
                  "examples/s against one worker: {two}× with 2 workers, {four}× with 4, on {cores} cores")),
    Lesson("13_tuning_experiments", "tests/tf/test_lesson_13.py",
           "tuning a learning rate: the run history (`%mwruns`, `--diff`, `mw_runs`) and the runs in TensorBoard "
           "(`--tensorboard DIR`)", ("02",), (LOCAL,), 10,
           Result(rf"^run (?P<best>\d+) has the lowest final loss, (?P<loss>{_FLOAT}): .*LR=(?P<lr>[0-9.]+)",
                  "three learning rates in one cell's history: LR={lr} ends lowest (loss {loss}); TensorBoard's "
                  "reader gives back the same final values")),
    Lesson("14_finding_the_bottleneck", "tests/tf/test_lesson_14.py",
           "finding the bottleneck: the slow-worker verdict and `--profile DIR` (every worker traced from the same "
           "step), fixed with the input recipe", ("05", "13"), (LOCAL,), 15,
           Result(r"^mwnotebook: worker 1, steps 20-24: (?P<before>[0-9.]+) ms per step.*input (?P<share>\d+)% of "
                  r"the step: INPUT BOUND[\s\S]*?^mwnotebook: worker 1, steps 20-24: (?P<after>[0-9.]+) ms per step",
                  "worker 1 named input-bound ({share}% of its step waiting for input); with the input recipe no "
                  "slow worker, steps 20-24 at {after} ms instead of {before} ms")),
)

BY_NAME = {lesson.name: lesson for lesson in LESSONS}


def lesson_names() -> list[str]:
    """Every lesson in notebooks/, in order."""
    return sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
