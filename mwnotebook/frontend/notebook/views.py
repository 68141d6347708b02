"""Pure renderings of cluster facts for people: each worker's TF_CONFIG, worker status, the one-time
security notice. Each returns a MIME bundle (``text/html`` plus a ``text/plain`` fallback)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any

from mwnotebook.engine.async_cluster import WorkerInfo

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


def tf_config_bundle(tf_configs: Sequence[dict[str, Any]], hosts: Sequence[str] = ()) -> dict[str, str]:
    """One row per worker with its TF_CONFIG: the same cluster everywhere, only task.index differs."""
    rows = []
    for i, cfg in enumerate(tf_configs):
        host = hosts[i] if i < len(hosts) else "localhost"
        rows.append([str(i), host, json.dumps(cfg, separators=(",", ":"))])
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
    rows = []
    for w in infos:
        row = [str(w.index), w.host or "-", str(w.pid or "-"), w.state, "yes" if w.alive else "no"]
        if devices is not None:
            row.append(describe_devices(devices[w.index] if w.index < len(devices) else None))
        row.append(json.dumps(w.tf_config, separators=(",", ":")) if w.tf_config else "-")
        rows.append(row)
    headers = ["worker", "host", "pid", "state", "alive"] + (["devices (seen by TF)"] if devices is not None else [])
    return _table(headers + ["TF_CONFIG"], rows, "mwnotebook cluster")


ISOLATED_NOTICE = (
    "Security: the workers' TensorFlow gRPC ports ({ports}) have no authentication; they are kept in a "
    "private network namespace, unreachable from other machines.")


def security_notice(addresses: Sequence[str], isolated: bool = False, remote: bool = False) -> str:
    ports = ", ".join(a.rpartition(":")[2] for a in addresses)
    where = "the worker hosts" if remote else "this machine"
    return (ISOLATED_NOTICE if isolated else SECURITY_NOTICE).format(ports=ports, where=where)
