"""Pure renderings of cluster facts for people: each worker's TF_CONFIG, worker status, the one-time
security notice. Each returns a MIME bundle (``text/html`` plus a ``text/plain`` fallback)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from mwnotebook.config.class_caps import ClassCaps
from mwnotebook.engine.cluster_status import WorkerInfo

SECURITY_NOTICE = (
    "Security: TensorFlow's gRPC server in each worker has no authentication and listens on ALL "
    "network interfaces (not only the address in TF_CONFIG). Anyone who can reach {where} on "
    "ports {ports} can run TensorFlow operations in your workers. Use a trusted or isolated network, "
    "or a firewall that blocks these ports from other machines.")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], caption: str) -> dict[str, str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [caption, "  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'><code>{html.escape(c)}</code></td>"
                                    for c in row) + "</tr>" for row in rows)
    page = (f"<table class='mwnotebook-table'><caption style='text-align:left'>{html.escape(caption)}</caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    return {"text/plain": "\n".join(lines), "text/html": page}


def tf_config_bundle(tf_configs: Sequence[dict[str, Any]], hosts: Sequence[str] = (),
                     tasks: Sequence[str] = ()) -> dict[str, str]:
    """One row per worker with its host and TF_CONFIG: the same cluster everywhere, only the task
    differs. ``tasks`` (a cluster with other roles): each row's role and task instead of a number,
    a ``--ps`` cluster's servers among the rows, so every task's host is shown."""
    rows = []
    for i, cfg in enumerate(tf_configs):
        host = hosts[i] if i < len(hosts) else "localhost"
        rows.append([tasks[i] if i < len(tasks) else str(i), host or "-", json.dumps(cfg, separators=(",", ":"))])
    if tasks:
        return _table(["task", "host", "TF_CONFIG"], rows, f"{len(rows)} TensorFlow tasks")
    return _table(["worker", "host", "TF_CONFIG"], rows, f"{len(rows)} TensorFlow workers")


def describe_devices(devices: dict[str, Any] | None) -> str:
    """``2 CPU, 1 GPU (CUDA_VISIBLE_DEVICES=0)`` from what TensorFlow in a worker reported."""
    if not devices:
        return "unknown (TensorFlow not available)"
    text = f"{len(devices.get('cpus', []))} CPU, {len(devices.get('gpus', []))} GPU"
    visible = devices.get("cuda_visible_devices")
    return f"{text} (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else text


def status_bundle(infos: Sequence[WorkerInfo],
                  devices: Sequence[dict[str, Any] | None] | None = None) -> dict[str, str]:
    """The ``%mwcluster status`` table. A cluster of plain workers: one row per worker with its
    TF_CONFIG. Any other (``--ps``, ``--chief``, ``--evaluator``): one row per task with its role,
    then the TF_CONFIG cluster they share, once (``devices``: one per entry of ``infos``, or fewer)."""
    if all(w.role == "worker" and w.runs_cell for w in infos):
        return _worker_table(infos, devices)
    return _task_table(infos, devices)


def _devices_of(w: WorkerInfo, devices: Sequence[dict[str, Any] | None]) -> str:
    """``devices`` is in status order: cell kernels, then a --ps cluster's servers."""
    if w.state == "notebook":
        return "-"  # the notebook's own process: not asked
    if w.index >= len(devices):
        return "-" if not w.runs_cell else describe_devices(None)
    return describe_devices(devices[w.index])


def _worker_table(infos: Sequence[WorkerInfo], devices: Sequence[dict[str, Any] | None] | None) -> dict[str, str]:
    rows = []
    for w in infos:
        row = [str(w.index), w.host or "-", str(w.pid or "-"), w.state, "yes" if w.alive else "no"]
        if devices is not None:
            row.append(_devices_of(w, devices))
        row.append(json.dumps(w.tf_config, separators=(",", ":")) if w.tf_config else "-")
        rows.append(row)
    headers = ["worker", "host", "pid", "state", "alive"] + (["devices (seen by TF)"] if devices is not None else [])
    return _table(headers + ["TF_CONFIG"], rows, "mwnotebook cluster")


def _task_table(infos: Sequence[WorkerInfo], devices: Sequence[dict[str, Any] | None] | None) -> dict[str, str]:
    rows = []
    for w in infos:
        state = f"{w.state} (restarted {w.restarts}x)" if w.restarts else w.state
        state += f" ({w.note})" if w.note else ""
        row = [w.role, w.task or "-", w.address or "-", w.host or "-", str(w.pid or "-"), state,
               "yes" if w.alive else "no"]
        if devices is not None:
            row.append(_devices_of(w, devices))
        rows.append(row)
    headers = ["role", "task", "address", "host", "pid", "state", "alive"]
    headers += ["devices (seen by TF)"] if devices is not None else []
    counts: dict[str, int] = {}
    for w in infos:
        counts[w.role] = counts.get(w.role, 0) + 1
    caption = "mwnotebook cluster: " + ", ".join(f"{n} {role}{'s' if n != 1 else ''}" for role, n in counts.items())
    bundle = _table(headers, rows, caption)
    shared = next((w.tf_config["cluster"] for w in infos if w.tf_config and w.role != "evaluator"), None)
    if shared is not None:
        note = ("TF_CONFIG cluster of every task above"
                + (" but the evaluator (whose TF_CONFIG names only itself)" if "evaluator" in counts else "")
                + "; each task's TF_CONFIG adds its own task: " + json.dumps(shared, separators=(",", ":")))
        bundle["text/plain"] += "\n" + note
        bundle["text/html"] += f"<p><code>{html.escape(note)}</code></p>"
    return bundle


def caps_text(caps: ClassCaps, threads: Mapping[str, str], running: str) -> str:
    """The teacher's caps for ``%mwcluster status`` (config/class_caps.py): each cap, the thread
    variables this cluster's tasks got from ``CPU_LIMIT``, and ``running`` (engine/class_caps.py
    ``running_summary``); "" when no cap is set."""
    lines = caps.lines()
    if not lines:
        return ""
    out = ["teacher's caps:", *(f"  {line}" for line in lines)]
    if threads:
        out.append("  this cluster's tasks: " + " ".join(f"{k}={v}" for k, v in sorted(threads.items())))
    if running:
        out.append("  " + running.replace("\n", "\n  "))
    return "\n".join(out)


ISOLATED_NOTICE = (
    "Security: the workers' TensorFlow gRPC ports ({ports}) have no authentication; they are kept in a "
    "private network namespace, unreachable from other machines.")


def security_notice(addresses: Sequence[str], isolated: bool = False, remote: bool = False) -> str:
    ports = ", ".join(a.rpartition(":")[2] for a in addresses)
    where = "the worker hosts" if remote else "this machine"
    return (ISOLATED_NOTICE if isolated else SECURITY_NOTICE).format(ports=ports, where=where)
