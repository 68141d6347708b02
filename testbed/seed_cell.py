"""The training cell of the two-worker seed tutorial (kept verbatim in tests/data/seed_train.py) and the line each
worker must print; a line to append that prints where a worker runs; a long all-reduce loop for tests that
kill a worker or a host mid-training."""

from pathlib import Path

SEED_CELL = (Path(__file__).resolve().parents[1] / "tests" / "data" / "seed_train.py").read_text(encoding="utf-8")


#: The line worker ``{i}`` of the seed prints (two workers, fixed seeds: the same numbers every run).
SEED_LINE = "worker={i} replicas=2 initial_loss=0.7459 final_loss=0.4168 final_accuracy=0.8281"


def expected_line(worker: int) -> str:
    return SEED_LINE.format(i=worker)


#: Appended to the seed: the worker's own TF_CONFIG address (where it was placed), after the seed's line.
WHERE_LINE = ('\nimport json as _json, os as _os\n_c = _json.loads(_os.environ["TF_CONFIG"])\n'
              'print("at", _c["cluster"]["worker"][_c["task"]["index"]].rsplit(":", 1)[0])\n')


#: A long MultiWorkerMirroredStrategy loop: every step is an all-reduce across the workers; it prints
#: "training" once the first step is through.
LONG_RUN = """
import time
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()

@tf.function
def step():
    return strategy.reduce(tf.distribute.ReduceOp.SUM,
                           strategy.run(lambda: tf.constant(1.0)), axis=None)

step()
print("training", flush=True)
for _ in range(100000):
    step()
    time.sleep(0.01)
"""
