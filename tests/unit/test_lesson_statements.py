"""Statements of the lessons that a check can hold to the code: every statement true.

* Every message lesson 04's troubleshooting table quotes is worded as the code words it: each literal
  piece between placeholders (capitals such as HOST, or ``…``) is in a string of mwnotebook's sources.
* Lesson 04 says how a host missing from known_hosts is treated per ``StrictHostKeyChecking``, as
  mwnotebook/launchers/ssh/known_hosts.py decides it.
* Lesson 10 names ``--ray-ssh`` once the option exists (it said the kernels are reached only directly).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import nbformat

from mwnotebook.config.options import add_cluster_arguments

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDERS = re.compile(r"\b(?:USER|HOST|PORT|N|KEY|PATH|MODULES|VERSION|REASON)\b|…")


def prose(name: str) -> str:
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def source_strings() -> str:
    """mwnotebook's sources with adjacent string literals joined (``"a " "b"`` -> ``"a b"``)."""
    text = "\n".join(p.read_text() for p in (ROOT / "mwnotebook").rglob("*.py"))
    return re.sub(r"\"\s*\n\s*f?\"", "", text)


def quoted_messages(table_heading: str, text: str) -> list[str]:
    """The backticked messages in the first column of the table under ``table_heading``."""
    section = text.split(table_heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [m for row in rows for m in re.findall(r"`([^`]+)`", row.split(" | ")[0])]


def test_lesson_04_quotes_the_codes_messages() -> None:
    messages = quoted_messages("## 6. Troubleshooting", prose("04_remote_hosts"))
    assert len(messages) >= 8, messages
    code = source_strings()
    for message in messages:
        pieces = [p.strip(" ()'") for p in PLACEHOLDERS.split(message)]
        pieces = [p for p in pieces if len(p) >= 6]
        assert pieces, message
        for piece in pieces:
            assert piece in code, f"lesson 04 quotes {message!r}: {piece!r} is in no message of mwnotebook"


def test_lesson_04_says_when_a_new_host_key_is_accepted() -> None:
    text = " ".join(prose("04_remote_hosts").split())
    assert "accept-new" in text and "refused with OpenSSH's default (`ask`" in text, text[:3000]
    known_hosts = (ROOT / "mwnotebook" / "launchers" / "ssh" / "known_hosts.py").read_text()
    assert 'strict_host_key_checking in ("yes", "ask")' in known_hosts  # the rule the lesson states


def test_lesson_10_names_ray_ssh() -> None:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    assert "--ray-ssh" in parser._option_string_actions  # noqa: SLF001 (argparse has no public lookup)
    assert "--ray-ssh" in prose("10_ray_cluster")
