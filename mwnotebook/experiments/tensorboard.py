"""A run's scalars as TensorFlow event files, for ``tensorboard --logdir DIR``.

One folder per run (``run-<n>-<start time>``), in it one per worker (``worker-<i>``: the worker's own
values) and ``global`` (the values over all workers, ``global_<name>`` without its prefix), so
TensorBoard draws the workers and the global line of a metric on one chart and lists every run.
Step records keep their step; epoch summaries are ``epoch_<name>`` at the epoch's index, as Keras'
own ``TensorBoard`` callback names them. Every event carries the time the worker measured it.

Written with TensorBoard's own record writer and event protos (``tensorboard.summary.writer.record_writer``,
``tensorboard.compat.proto``) into a plain file: TensorBoard's ``EventFileWriter`` goes through
``tensorboard.compat.tf``, which imports TensorFlow when it is installed, and the notebook kernel
does not load TensorFlow for a log file.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mwnotebook.experiments.history import RunRecord
from mwnotebook.experiments.series import Scalar, scalars

log = logging.getLogger(__name__)

def run_folder_name(record: RunRecord) -> str:
    return f"run-{record.number}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(record.started))}"


def write_run(record: RunRecord, metrics: Sequence[Mapping[str, Any]], logdir: str | os.PathLike[str]) -> Path:
    """Write run ``record``'s scalars under ``logdir``; returns its run folder. Raises ``OSError``
    when the directory cannot be made or written, ``ImportError`` without the tensorboard package."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    root = Path(logdir).expanduser() / run_folder_name(record)
    suffix = 1
    while root.exists():  # the same kernel's run number after a new session: a folder of its own
        suffix += 1
        root = root.with_name(f"{run_folder_name(record)}-{suffix}")
    by_folder: dict[str, list[Scalar]] = {}
    for scalar in scalars(metrics):
        by_folder.setdefault(scalar[0], []).append(scalar)
    root.mkdir(parents=True)
    for folder, rows in sorted(by_folder.items()):
        directory = root / folder
        directory.mkdir()
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.mwnotebook"
        with open(directory / name, "wb") as f:
            writer = RecordWriter(f)
            writer.write(event_pb2.Event(wall_time=record.started, file_version="brain.Event:2",
                                         source_metadata=event_pb2.SourceMetadata(writer="mwnotebook"))
                         .SerializeToString())
            for _folder, tag, step, wall, value in rows:
                summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
                writer.write(event_pb2.Event(wall_time=wall, step=step, summary=summary).SerializeToString())
    return root
