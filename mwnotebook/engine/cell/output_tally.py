"""What one request's stream output came to: what arrived, against what the worker says it wrote.

The worker counts the characters each request writes per stream (mwnotebook/processes/runtime/output.py)
and reports the count with its execute_reply (mwnotebook/engine/workers/worker.py); compared with what
arrived, it says whether output was lost.
"""

from __future__ import annotations

import ast
from typing import Any


class OutputTally:
    """Counts the stream characters that arrived for one request, and appends them to the log
    (opened at the first stream message: most requests write nothing)."""

    def __init__(self, log_path: str | None) -> None:
        self.received: dict[str, int] = {}
        #: Characters per stream the worker says the request wrote by its reply (None: unknown).
        self.written: dict[str, int] | None = None
        self._log_path = log_path
        self._file: Any = None

    def add(self, msg: dict[str, Any]) -> None:
        if msg["msg_type"] != "stream":
            return
        name = msg["content"].get("name", "stdout")
        text = msg["content"].get("text", "")
        self.received[name] = self.received.get(name, 0) + len(text)
        if self._log_path:
            if self._file is None:
                self._file = open(self._log_path, "a", encoding="utf-8")
            self._file.write(text)

    def expect(self, expression: dict[str, Any] | None) -> None:
        """Take the worker's count (an evaluated user expression); an unusable one stays unknown."""
        if not expression or expression.get("status") != "ok":
            return
        try:
            written = ast.literal_eval(expression.get("data", {}).get("text/plain", "{}"))
        except (ValueError, SyntaxError):
            return
        if isinstance(written, dict):
            self.written = {name: count for name, count in written.items() if isinstance(count, int)}

    def caught_up(self) -> bool:
        """Everything the worker counted has arrived (False while its count is unknown)."""
        return self.written is not None and not self.lost()

    def lost(self) -> dict[str, int]:
        """Per stream, characters the worker wrote that did not arrive ({} if it cannot say)."""
        if self.written is None:
            return {}
        return {name: count - self.received.get(name, 0) for name, count in self.written.items()
                if count > self.received.get(name, 0)}

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
