"""``--max-restarts`` on real two-worker TensorFlow clusters: training that survives SIGKILLed workers.

* chaos fit: a tf_keras ``fit`` (8 epochs, ``BackupAndRestore``, no shuffle, one pass per epoch)
  with 3 SIGKILLs at random moments (alternating workers; the second one during the restart the
  first caused) and ``max_restarts=5``: the cell completes with the final metrics of an
  uninterrupted run of the same cell, the metrics store holds one continuous run with 3 marks,
  every epoch line of every attempt is there in order, and no worker process is left behind;
* the same for the seed's custom loop resuming from a ``CheckpointManager``;
* a cell that kills its own worker every time uses up its restarts and fails listing every attempt.

The random moments come from ``MW_CHAOS_SEED`` (printed, so that a failure can be replayed).
Per-attempt ``timeout`` values are generous hang bounds only (a loaded 2-core machine).
"""

from __future__ import annotations

import io
import os
import random
import re

import pytest

from mwnotebook import Cluster, WorkerDiedError
from mwnotebook.frontend.text.relay import TextRelay
from mwnotebook.shared.events import Event, EventSink
from testbed.chaos import Killer, final_line, fit_cell, loop_cell, random_plan
from testbed.processes import MW_MODULES, descendants, kill_all, wait_gone
from tests._plugins.reliability_table import record

pytestmark = [pytest.mark.reliability, pytest.mark.tf, pytest.mark.slow]

FIT_STEPS = 64  # 2048 examples / global batch 32
LOOP_STEPS = 8
EPOCHS = 8
HANG_BOUND = 300  # seconds per attempt: only catches a hang


@pytest.fixture(scope="module")
def cluster():
    before = descendants()
    c = Cluster(workers=2, cpu=True)
    c.start()
    yield c
    c.stop()
    left, _ = wait_gone(descendants() - before, timeout=10)
    kill_all(left)
    assert not left, f"worker processes left behind: {sorted(left)}"


def _seed() -> int:
    seed = int(os.environ.get("MW_CHAOS_SEED") or random.randrange(1_000_000))
    print(f"MW_CHAOS_SEED={seed}")
    return seed


def _fan(*sinks: EventSink) -> EventSink:
    def deliver(event: Event) -> None:
        for sink in sinks:
            sink(event)
    return deliver


def _pids(cluster: Cluster) -> set[int]:
    return {info.pid for info in cluster.status() if info.pid}


def _epoch_numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"^epoch (\d+) loss", text, re.M)]


def _chaos(cluster: Cluster, cell: str, reference_cell: str, steps: int, name: str) -> None:
    reference = cluster.run(reference_cell, timeout=HANG_BOUND)
    expected = [final_line(reference.stdout(i)) for i in range(2)]
    assert all(expected) and expected[0] == expected[1], expected

    rng = random.Random(_seed())
    killer = Killer(cluster, random_plan(rng, steps), rng)
    shown, shown_err = io.StringIO(), io.StringIO()
    relay = TextRelay(shown, shown_err, live=False, num_workers=2)
    first_pids = _pids(cluster)
    result = cluster.run(cell, on_event=_fan(killer, relay), timeout=HANG_BOUND, max_restarts=5)
    relay.flush()
    ended = [final_line(result.stdout(i)) for i in range(2)]
    old = (first_pids | {k.pid for k in killer.kills}) - _pids(cluster)
    left, _ = wait_gone(old, timeout=10, modules=MW_MODULES)
    kill_all(left)
    record(f"restarts: {name}", detected_s=None, failed_s=None, recovered=ended == expected, orphans=len(left),
           note=f"kills {[(k.worker, k.when) for k in killer.kills]}, kill->training {killer.kill_to_training()} s, "
                f"restart {[round(r.restart_seconds, 2) for r in result.restarts]} s")

    # three kills, alternating workers, the second while the cell was being restarted
    assert [k.when for k in killer.kills] == ["training", "restarting", "training"], killer.kills
    assert killer.kills[0].worker != killer.kills[1].worker != killer.kills[2].worker
    assert len(result.restarts) == 3 and result.attempts == 4, result.restarts
    # resumed, and right: the same final metrics as the uninterrupted run (TF's resume is exact here)
    assert ended == expected, (ended, expected)
    # one continuous run in the metrics store: every step once, in order, 3 marks
    xs, _ = killer.store.global_series("loss")
    assert list(xs) == [float(s) for s in range(1, EPOCHS * steps + 1)], xs
    marks = killer.store.restart_marks()
    assert len(marks) == 3 and all(m.step is not None for m in marks)
    assert [m.step for m in marks if m.resumed_step is not None] == sorted(
        m.step for m in marks if m.resumed_step is not None)
    # every attempt's lines, in order: each attempt counts epochs up by one from where it resumed,
    # the last one ends at the last epoch, and what was shown is what the result holds
    for worker in range(2):
        for attempt in range(1, 5):
            numbers = _epoch_numbers(result.stdout(worker, attempt=attempt))
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers))) if numbers else True, numbers
        assert _epoch_numbers(result.stdout(worker, attempt=4))[-1] == EPOCHS
        worker_lines = [line[len(f"[worker {worker}] "):] for line in shown.getvalue().splitlines()
                        if line.startswith(f"[worker {worker}] ")]
        assert worker_lines == result.stdout(worker).splitlines()
    assert result.output_complete
    notes = [line for line in shown.getvalue().splitlines() if line.startswith("[mwnotebook] ")]
    assert [re.search(r"restart (\d) of 5", n).group(1) for n in notes] == ["1", "2", "3"], notes  # type: ignore[union-attr]
    assert not left, f"old workers still alive: {sorted(left)}"


def test_a_fit_survives_three_kills_and_ends_as_an_uninterrupted_one(cluster, tmp_path):
    _chaos(cluster, fit_cell(str(tmp_path / "chaos")), fit_cell(str(tmp_path / "reference")), FIT_STEPS, "fit")


def test_the_seed_loop_survives_three_kills_with_a_checkpoint_manager(cluster, tmp_path):
    _chaos(cluster, loop_cell(str(tmp_path / "chaos")), loop_cell(str(tmp_path / "reference")), LOOP_STEPS,
           "custom loop")


DIE_EVERY_TIME = '''
class Die(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 5 and int(os.environ["MWNOTEBOOK_WORKER_INDEX"]) == 1:
            os._exit(3)   # the cell kills its own worker, every attempt
'''


def test_a_worker_lost_more_often_than_allowed_fails_listing_every_attempt(cluster, tmp_path):
    cell = fit_cell(str(tmp_path / "backup"), extra=DIE_EVERY_TIME, callbacks=", Die()")
    with pytest.raises(WorkerDiedError) as caught:
        cluster.run(cell, timeout=HANG_BOUND, max_restarts=2)
    error = caught.value
    assert [a.attempt for a in error.attempts] == [1, 2]
    text = str(error)
    assert "The cell lost workers 3 times (2 restarts):" in text, text
    for n in (1, 2, 3):
        assert re.search(rf"attempt {n}: worker 1 died \(exit code 3\)", text), text
    assert cluster.run("print('fresh')", timeout=HANG_BOUND).stdout(0) == "fresh\n"  # the group was restarted
