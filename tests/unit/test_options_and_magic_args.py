"""Argument parsing of %%mwtrain / %mwcluster and spec validation: every bad input is a clear
UsageError before anything starts."""

import pytest
from IPython.core.error import UsageError

from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import worker_envs
from mwnotebook.errors import ConfigError
from mwnotebook.frontend.notebook.magics import _parse, _spec, mwcluster_parser, mwtrain_parser


def spec_of(line: str) -> ClusterSpec:
    return _spec(_parse(mwtrain_parser(), line))


def test_defaults():
    spec = spec_of("")
    assert spec.workers == 2 and not spec.cpu and spec.env == {}


def test_full_line():
    spec = spec_of("--workers 3 --cpu --env A=1 --env B=x=y --no-legacy-keras --preload")
    assert spec.workers == 3 and spec.cpu and spec.preload
    assert spec.env == {"A": "1", "B": "x=y"}
    assert spec.legacy_keras is False


@pytest.mark.parametrize("line, message", [
    ("--workers 0", "between 1 and 64, got 0"),
    ("--workers -1", "between 1 and 64, got -1"),
    ("--workers abc", "whole number, got 'abc'"),
    ("--workers 2.5", "whole number, got '2.5'"),
    ("--workers 100000", "between 1 and 64, got 100000"),
    ("--frobnicate", "unrecognized arguments: --frobnicate"),
    ("--env NOEQUALS", "KEY=VALUE"),
    ("--env TF_CONFIG={}", "mwnotebook sets TF_CONFIG for each worker"),
    ("--env 1BAD=x", "not a valid environment variable name"),
    ("--cpu --env CUDA_VISIBLE_DEVICES=0", "conflict"),
    ("--cpu --gpus-per-worker 1", "conflict"),
    ("--timeout 0", "--timeout must be > 0"),
    ("--timeout soon", "number of seconds"),
    ("--collective magic", "invalid choice"),
    ("--workers-per-host 2", "only apply together with --hosts"),
    ("--env 'A=1", "cannot parse"),
])
def test_bad_input_is_a_usage_error(line, message):
    with pytest.raises(UsageError, match=None) as info:
        spec_of(line)
    assert message in str(info.value)


def test_mwcluster_actions():
    assert _parse(mwcluster_parser(), "status").action == "status"
    with pytest.raises(UsageError, match="invalid choice"):
        _parse(mwcluster_parser(), "explode")


def test_help_text_lists_the_options():
    text = mwtrain_parser().format_help()
    for option in ("--workers", "--cpu", "--env", "--timeout", "--no-legacy-keras"):
        assert option in text


def test_spec_validation_outside_the_magic():
    with pytest.raises(ConfigError, match="whole number"):
        ClusterSpec(workers=True)
    with pytest.raises(ConfigError, match="between 1 and 64"):
        ClusterSpec(workers=65)


def test_worker_env_sets_what_the_seed_sets():
    spec = ClusterSpec(workers=2, cpu=True, env={"X": "1"}, legacy_keras=True)
    env = worker_envs(spec, ["127.0.0.1:1", "127.0.0.1:2"])[1]
    assert env["CUDA_VISIBLE_DEVICES"] == "-1"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert env["X"] == "1"
    assert env["MWNOTEBOOK_WORKER_INDEX"] == "1"
    assert '"index":1' in env["TF_CONFIG"]
    assert "TF_USE_LEGACY_KERAS" not in worker_envs(ClusterSpec(workers=1, legacy_keras=False), ["a:1"])[0]


def test_equal_specs_share_a_cluster_and_different_ones_do_not():
    assert spec_of("--workers 2 --cpu") == spec_of("--cpu --workers 2")
    assert spec_of("--workers 2 --cpu") != spec_of("--workers 3 --cpu")


def test_a_magic_line_is_parsed_once_and_handed_out_as_copies():
    from IPython.core.error import UsageError

    from mwnotebook.frontend.notebook import magics

    first = magics._parse_mwtrain_line("--workers 3 --cpu --env A=1")
    first.workers = 99  # a caller changing its copy changes nothing for the next cell
    again = magics._parse_mwtrain_line("--workers 3 --cpu --env A=1")
    assert again.workers == 3 and again.env == [("A", "1")] and again is not first
    for _ in range(2):  # a bad line is refused every time, not remembered
        with pytest.raises(UsageError):
            magics._parse_mwtrain_line("--workers 0")
