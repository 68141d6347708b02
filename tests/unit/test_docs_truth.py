"""What the user guide states, checked against the code: every message the troubleshooting page
quotes is in the package, every ``--option`` a guide page names is one the magics or the command
accept, every ``MWNOTEBOOK_*`` variable a page names is read somewhere, and the figures the remote
hosts page gives (keepalive, silence, reconnection and restart waits) are the code's constants."""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = sorted((ROOT / "docs" / "guide").glob("*.md"))
PAGES = [*GUIDE, ROOT / "docs" / "index.md", ROOT / "README.md"]


def _string_corpus() -> str:
    """Every string literal of the package, an f-string's fields as NUL (implicit concatenation joined)."""
    out = []
    for path in (ROOT / "mwnotebook").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                out.append("".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "\0"
                                   for v in node.values))
    return "\n".join(out)


def quoted_messages(page: Path) -> list[str]:
    """The code spans of each definition-list term (a line followed by ``: ...``)."""
    lines = page.read_text().splitlines()
    messages = []
    for line, after in zip(lines, lines[1:]):
        if after.startswith(": ") and line.strip() and not line.startswith(":"):
            messages += [m.strip() for m in re.findall(r"``? ?([^`]+?) ?``?", line) if m.strip()]
    return messages


#: What a message shows for a value: ``...``, ``'...'``, ``(...)``, ``{...}``, an upper-case name or
#: a one-letter count (N, K, i), an option's name (often filled in: ``{name} must be ...``).
_PLACEHOLDER = re.compile(r"\bworker [ij]\b|'\.\.\.'|\(\.\.\.\)|\{\.\.\.\}|\.\.\.|\b(?:[A-Z]{1,8}|[ijNMKS])\b|--[a-z][a-z-]*")

#: Messages of TensorFlow and Keras the page quotes (not ours to find in the package).
FOREIGN = ("ValueError: Attempt to convert a value (PerReplica:{...}) ... to a Tensor",
           "RuntimeError: Collective ops must be configured at program startup")


def missing_fragments(message: str, corpus: str) -> list[str]:
    fragments = [f.strip() for f in _PLACEHOLDER.split(message) if len(f.strip()) >= 5]
    return [f for f in fragments if f not in corpus]


def test_every_message_the_troubleshooting_page_quotes_is_in_the_code() -> None:
    corpus = _string_corpus()
    messages = [m for m in quoted_messages(ROOT / "docs" / "guide" / "troubleshooting.md") if m not in FOREIGN]
    assert len(messages) > 25
    assert {m: f for m in messages if (f := missing_fragments(m, corpus))} == {}


def test_the_message_check_sees_a_message_that_is_not_there() -> None:
    corpus = _string_corpus()
    assert missing_fragments("--ps starts local workers only", corpus) == ["starts local workers only"]
    assert missing_fragments("workers must be between 1 and ..., got N", corpus) == []


def _accepted_options() -> set[str]:
    from mwnotebook.frontend.cli.command import build_parser
    from mwnotebook.frontend.notebook.magics import mwcluster_parser, mwprofile_parser, mwruns_parser, mwtrain_parser

    options: set[str] = set()

    def add(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:  # noqa: SLF001 - argparse has no public list of its actions
            options.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001 - nor of its subparsers
                for sub in action.choices.values():
                    add(sub)

    for parser in (mwtrain_parser(), mwcluster_parser(), mwruns_parser(), mwprofile_parser(), build_parser()):
        add(parser)
    return options


#: Other programs' options the pages quote (Slurm's, Ray's, unshare's, Jupyter's, TensorBoard's). A line that runs
#: a benchmark or a tool (``python -m benchmarks...``, ``python tools/...``) is not scanned.
OTHERS = {"--cpus-per-task", "--gpus-per-task", "--kill-on-bad-exit", "--nodelist", "--ntasks", "--overlap",
          "--no-kill", "--no-shell", "--head", "--ray-client-server-port", "--net", "--runtime-dir", "--logdir",
          "--address", "--working-dir"}
_OTHER_COMMAND = re.compile(r"benchmarks[./]|tools/")


def test_every_option_the_guide_names_is_accepted() -> None:
    accepted = _accepted_options()
    named = {option: page.name for page in PAGES for line in page.read_text().splitlines()
             if not _OTHER_COMMAND.search(line) for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line)}
    assert {o: p for o, p in named.items() if o not in accepted and o not in OTHERS} == {}
    assert "--max-restarts" in named and "--ray-ssh" in named  # the scan reads the pages


def test_every_environment_variable_the_docs_name_is_read() -> None:
    sources = [*(ROOT / "mwnotebook").rglob("*.py"), ROOT / "hatch_build.py"]
    code = "\n".join(p.read_text() for p in sources)
    named = {v for page in PAGES for v in re.findall(r"MWNOTEBOOK_[A-Z_]+[A-Z]", page.read_text())}
    assert named and [v for v in sorted(named) if v not in code] == []


def test_the_remote_hosts_page_gives_the_codes_figures() -> None:
    """A dead host: noticed by the SSH keepalive (interval x (count + 1)), the agent's silence limit;
    the 30 s reconnection window of one start and the 60 s a --max-restarts restart tries in all."""
    from mwnotebook.engine.cell.restarts import HOST_WAIT_SECONDS
    from mwnotebook.launchers.remote.agent_channel import AGENT_PING_SECONDS, AGENT_SILENCE_LIMIT
    from mwnotebook.launchers.remote.kernel_start import KEEPALIVE_COUNT_MAX, KEEPALIVE_INTERVAL
    from mwnotebook.launchers.ssh.launcher import RECONNECT_WINDOW

    page = " ".join((ROOT / "docs" / "guide" / "remote-hosts.md").read_text().split())
    figures = [f"a keepalive every {KEEPALIVE_INTERVAL:g} s", f"when {KEEPALIVE_COUNT_MAX} go unanswered",
               f"after {KEEPALIVE_INTERVAL * (KEEPALIVE_COUNT_MAX + 1):g} s of silence",
               f"a ping from the notebook every {AGENT_PING_SECONDS:g} s",
               f"kills its kernel after {AGENT_SILENCE_LIMIT:g} s of silence",
               f"**{RECONNECT_WINDOW:g} s: one reconnection.**", f"for up to {RECONNECT_WINDOW:g} s",
               f"**{HOST_WAIT_SECONDS:g} s: a restart within the cell.**", f"for up to {HOST_WAIT_SECONDS:g} s"]
    assert [f for f in figures if f not in page] == []


def test_the_slurm_and_ray_pages_give_the_same_figures() -> None:
    """The same layers as seen from Slurm (the login node's reaper, the agents) and Ray (--ray-ssh)."""
    from mwnotebook.launchers.remote.agent_channel import AGENT_SILENCE_LIMIT
    from mwnotebook.launchers.remote.kernel_start import KEEPALIVE_COUNT_MAX, KEEPALIVE_INTERVAL
    from mwnotebook.launchers.slurm.job import REAPER_SILENCE_LIMIT

    slurm = " ".join((ROOT / "docs" / "guide" / "slurm.md").read_text().split())
    assert f"after {REAPER_SILENCE_LIMIT:g} s without a ping" in slurm
    assert f"each agent ends its kernel after {AGENT_SILENCE_LIMIT:g} s without one" in slurm
    ray = " ".join((ROOT / "docs" / "guide" / "ray.md").read_text().split())
    assert f"a silent network is noticed in {KEEPALIVE_INTERVAL * (KEEPALIVE_COUNT_MAX + 1):g} s" in ray


def test_the_worker_api_page_says_what_mw_strategy_defaults_to() -> None:
    from mwnotebook.frontend.notebook.magics import mwtrain_parser
    from mwnotebook.worker._strategy import _resolve_collective, strategy

    page = " ".join((ROOT / "docs" / "guide" / "worker-api.md").read_text().split())
    assert inspect.signature(strategy).parameters["timeout"].default is None
    assert "It sets no timeout by default" in page
    assert mwtrain_parser().parse_args([]).collective == "auto"
    assert _resolve_collective(None) == "auto" and "(`auto` by default" in page


@pytest.mark.parametrize("page", [p.name for p in GUIDE])
def test_guide_pages_link_only_to_existing_pages(page: str) -> None:
    text = (ROOT / "docs" / "guide" / page).read_text()
    targets = re.findall(r"\]\(((?:\.\./)?[\w/.-]+\.md)(?:#[\w-]*)?\)", text)
    assert [t for t in targets if not (ROOT / "docs" / "guide" / t).resolve().exists()] == []


def test_every_mw_call_and_module_the_guide_names_exists() -> None:
    """``mw.x(...)`` is in ``mwnotebook.worker.__all__``; ``mwnotebook.a.b`` imports (or is an attribute)."""
    import importlib

    import mwnotebook.worker

    text = "\n".join(page.read_text() for page in PAGES)
    calls = set(re.findall(r"\bmw\.([a-z_]+)\(", text))
    assert "strategy" in calls and [c for c in sorted(calls) if c not in mwnotebook.worker.__all__] == []
    missing = []
    for dotted in sorted(set(re.findall(r"\bmwnotebook\.([a-z_]+(?:\.[a-z_]+)*)", text))):
        try:
            importlib.import_module(f"mwnotebook.{dotted}")
        except ImportError:
            parent, _, attr = f"mwnotebook.{dotted}".rpartition(".")
            if not hasattr(importlib.import_module(parent), attr):
                missing.append(dotted)
    assert missing == []


#: Errors of TensorFlow (tf.errors) and IPython the pages name; Python's own are builtins.
FOREIGN_ERRORS = {"AbortedError", "CancelledError", "DeadlineExceededError", "InternalError", "UnavailableError",
                  "UsageError"}


def test_every_error_the_pages_name_is_importable() -> None:
    """An error class a page names in code is Python's, TensorFlow's, or importable from ``mwnotebook``
    or ``mwnotebook.worker`` (so ``except`` it works as written)."""
    import builtins

    import mwnotebook
    import mwnotebook.worker

    text = "\n".join(page.read_text() for page in PAGES)
    pattern = r"`(?:[\w.]+\.)?([A-Z]\w*(?:Error|Lost|Refused|Interrupted|Aborted|Exceeded))\b"
    named = set(re.findall(pattern, text))
    assert {"RestartFailedError", "ParameterServerLost"} <= named  # the scan reads the pages
    known = set(mwnotebook.__all__) | set(mwnotebook.worker.__all__) | set(dir(builtins)) | FOREIGN_ERRORS
    assert sorted(named - known) == []
