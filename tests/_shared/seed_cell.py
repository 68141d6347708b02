"""The training cell of the two-worker seed tutorial (kept verbatim in tests/data/seed_train.py) and the line each worker must print."""

from pathlib import Path

SEED_CELL = (Path(__file__).resolve().parents[1] / "data" / "seed_train.py").read_text(encoding="utf-8")


def expected_line(worker: int) -> str:
    return (f"worker={worker} replicas=2 initial_loss=0.7459 final_loss=0.4168 "
            "final_accuracy=0.8281")
