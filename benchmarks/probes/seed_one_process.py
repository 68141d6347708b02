"""The seed cell's training (tests/data/seed_train.py) in this one process, a one-worker cluster: for
native heap profilers, which follow one process (not a benchmark; it writes no results file).

    heaptrack -o /tmp/seed python -m benchmarks.probes.seed_one_process
    heaptrack -o /tmp/base python -m benchmarks.probes.seed_one_process --import-only
    heaptrack_print -f /tmp/seed.zst -d /tmp/base.zst -l 1 -p 0 -a 0 -T 0   # what the cell left allocated

(Give heaptrack the interpreter itself, ``$(python -c 'import sys; print(sys.executable)')``, not a
shim script that execs it.)
"""

from __future__ import annotations

import json
import os
import socket
import sys

from benchmarks._suite import SEED_CODE


def main() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"127.0.0.1:{port}"]},
                                          "task": {"type": "worker", "index": 0}})
    import tensorflow  # noqa: F401
    import tf_keras  # noqa: F401

    if "--import-only" in sys.argv:
        return
    # up to the seed's checks: with one replica its accuracy check (written for 2) may fail
    training = SEED_CODE[:SEED_CODE.index("tf.debugging.assert_equal")]
    exec(compile(training, "seed_train.py", "exec"), {"__name__": "__main__"})
    print("trained", flush=True)


if __name__ == "__main__":
    main()
