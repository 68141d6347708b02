"""``%%mwtrain`` and ``%mwcluster``: parse arguments, call the Python API, show its results.

Adds no behaviour of its own: everything here is also reachable through :class:`mwnotebook.Cluster`.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar, cast

from IPython.core import magic as ipython_magic
from IPython.core.error import UsageError
from IPython.core.magic import Magics, magics_class
from IPython.display import publish_display_data

from mwnotebook.config.class_caps import ClassCaps
from mwnotebook.config.options import (
    add_cluster_arguments,
    add_coordinator_arguments,
    add_experiment_arguments,
    add_profile_arguments,
    add_restart_argument,
    seconds,
    spec_from_options,
)
from mwnotebook.config.spec import ClusterSpec
from mwnotebook.config.worker_env import prestart_env
from mwnotebook.engine.cell.result import RunResult
from mwnotebook.engine.class_caps import running_summary
from mwnotebook.engine.cluster import Cluster
from mwnotebook.engine.roles import notebook_coordinator
from mwnotebook.errors import ClusterInterrupted, ConfigError, MWNotebookError
from mwnotebook.experiments.collect import RunCollector
from mwnotebook.experiments.history import Outcome, RunHistory, RunRecord, cell_hash
from mwnotebook.experiments.outlets import Outlets
from mwnotebook.experiments.profile import ProfileRequest, ProfileSummary, run_profiled
from mwnotebook.experiments.store import RunStore, kernel_id
from mwnotebook.export.job import add_format_argument, export_job
from mwnotebook.frontend.notebook import late_view
from mwnotebook.frontend.notebook import runs_view as runs_view
from mwnotebook.frontend.notebook.keras_choice import KerasChoice
from mwnotebook.frontend.notebook.live_chart import DEFAULT_COMPARE, ChartOnFirstMetric, preload_in_background
from mwnotebook.frontend.notebook.output_areas import WorkerOutputAreas
from mwnotebook.frontend.notebook.run_record import one_line, record_run, set_options
from mwnotebook.frontend.notebook.usage_view import usage_bundle
from mwnotebook.frontend.notebook.views import caps_text, security_notice, status_bundle, tf_config_bundle
from mwnotebook.frontend.text.relay import TextRelay, WorkerNames
from mwnotebook.shared.events import Event, EventSink
from mwnotebook.shared.step_times import slow_worker_line

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    """argparse that reports problems as IPython UsageErrors instead of exiting the kernel."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}\n\n{self.format_usage()}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:  # e.g. --help
        raise UsageError(message or self.format_help())


def mwtrain_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%%mwtrain", add_help=False, description=(
        "Run this cell on N TensorFlow worker kernels at once, each with its own TF_CONFIG. Output is "
        "labelled [worker i]; when any worker fails, the others are stopped and the cell raises. Workers "
        "and their variables persist between cells with the same options; other options restart them."))
    add_cluster_arguments(parser)
    parser.add_argument("--timeout", type=seconds, default=None, metavar="SECONDS",
                        help="fail the cell if any worker runs longer than this")
    add_restart_argument(parser)
    parser.add_argument("--no-dashboard", action="store_true", help="no live chart, text output only")
    parser.add_argument("--compare", type=_run_count, default=DEFAULT_COMPARE, metavar="N",
                        help=(f"draw the last N runs of this cell faintly under the live curves (default "
                              f"{DEFAULT_COMPARE}; 0: none); the chart's legend shows or hides them"))
    parser.add_argument("--compare-saved", action="store_true",
                        help=("keep those earlier runs in the picture the cell keeps when it ends (by default "
                              "that picture shows this run only)"))
    parser.add_argument("--show-tf-startup", action="store_true",
                        help=("show TensorFlow's start-up notices (CPU features, oneDNN, CUDA driver); "
                              "hidden by default"))
    parser.add_argument("--export", default=None, metavar="DIR",
                        help="also write the cell as a script plus one launcher per worker into DIR")
    add_format_argument(parser, "with --export: ")
    add_experiment_arguments(parser)
    add_profile_arguments(parser)
    return parser


_mwtrain_parser: argparse.ArgumentParser | None = None


def _cached_mwtrain_parser() -> argparse.ArgumentParser:
    """Built once: building it costs about a millisecond, which a no-op cell should not pay."""
    global _mwtrain_parser
    if _mwtrain_parser is None:
        _mwtrain_parser = mwtrain_parser()
    return _mwtrain_parser


_parsed_lines: dict[str, argparse.Namespace] = {}


def _parse_mwtrain_line(line: str) -> argparse.Namespace:
    """A line parses the same way every time (shlex + argparse, ~0.3 ms): kept per line, as a notebook
    reruns the same cells; a copy is handed out."""
    ns = _parsed_lines.get(line)
    if ns is None:
        ns = _parse(_cached_mwtrain_parser(), line)
        if len(_parsed_lines) >= 64:
            _parsed_lines.clear()
        _parsed_lines[line] = ns
    return copy.copy(ns)


def mwcluster_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%mwcluster", add_help=False, description=(
        "Manage the notebook's worker cluster: status, start (in the background; with --coordinator "
        "notebook it waits), restart, stop; stacks shows each worker's current Python stacks."))
    parser.add_argument("action", choices=("status", "start", "restart", "stop", "stacks"))
    add_cluster_arguments(parser)
    add_coordinator_arguments(parser)
    return parser


def mwprofile_parser() -> argparse.ArgumentParser:
    """``%mwprofile``: profile the next ``%%mwtrain`` cells (experiments/profile.py), stop, or show."""
    parser = _Parser(prog="%mwprofile", add_help=False, description=(
        "%mwprofile DIR [--steps A:B]: every following %%mwtrain cell runs as with --profile DIR (TensorFlow's "
        "profiler on every worker from step A on, the summary of steps A to B; default 6:10). %mwprofile off: "
        "stop. %mwprofile alone: "
        "the setting and the last profiled cell's summary."))
    parser.add_argument("directory", nargs="?", default=None, metavar="DIR|off",
                        help="where the traces go (DIR/plugins/profile/RUN/<task>.xplane.pb), or off")
    parser.add_argument("--steps", default=None, metavar="A:B", help="the steps traced, A to B both included")
    return parser


def mwruns_parser() -> argparse.ArgumentParser:
    """``%mwruns``'s options (frontend/notebook/runs_view.py), reported as UsageErrors."""
    return runs_view.mwruns_parser(_Parser)


class NotebookSession:
    """The cluster that this notebook's magics share, what its last cell produced, and the run
    history of every ``%%mwtrain`` cell (``runs``: in memory only unless one with a store is given)."""

    def __init__(self, runs: RunHistory | None = None) -> None:
        self.runs = runs if runs is not None else RunHistory()
        self.cluster: Cluster | None = None
        self.last_result: RunResult | None = None
        self._security_notice_shown = False
        self._announced: Cluster | None = None
        self._announced_addresses: list[str] = []
        self._caps: ClassCaps | None = None
        self.keras = KerasChoice()
        #: ``%mwprofile DIR``: profile every following cell (None: only cells with --profile)
        self.profile: ProfileRequest | None = None
        self.last_profile: ProfileSummary | None = None

    def caps(self) -> ClassCaps:
        """The teacher's caps (config/class_caps.py), read from this kernel's environment once; a bad
        value is a UsageError naming the variable (each time, before anything starts)."""
        if self._caps is None:
            try:
                self._caps = ClassCaps.from_environ(os.environ)
            except ConfigError as exc:
                raise UsageError(str(exc)) from None
        return self._caps

    def cluster_for(self, spec: ClusterSpec) -> Cluster:
        """Reuse the running cluster when its spec is the same; otherwise replace it, once the
        teacher's caps allow the new one (checked before the running one is stopped, which is not
        counted: engine/class_caps.py)."""
        if self.cluster is not None and self.cluster.spec == spec:
            return self.cluster
        cluster = Cluster(spec, caps=self.caps())
        try:
            cluster.check_caps(replacing=self.cluster)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        self.stop()
        self.cluster = cluster
        return self.cluster

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def announce(self, cluster: Cluster) -> None:
        """Show each worker's TF_CONFIG once per cluster, and the gRPC security notice once per session.

        Reads what the started cluster holds: its kernels' TF_CONFIGs and hosts, and the addresses
        its launcher placed every task on (no status round trip to the workers)."""
        if self._announced is cluster and self._announced_addresses == cluster.addresses:
            return  # a cluster started afresh after a failed restart has new addresses: shown again
        self._announced, self._announced_addresses = cluster, cluster.addresses
        hosts = [worker.handle.host for worker in cluster.workers]
        layout = cluster.spec.layout
        if layout.parameter_server or layout.chief or layout.evaluator:
            # every task with its role and host: a --ps cluster's servers too (where --place put them)
            servers = layout.server_tasks()
            server_hosts = cluster.server_hosts
            tasks = [*layout.cell_tasks(), *servers]
            configs = [*cluster.tf_configs, *(layout.tf_config(cluster.addresses, t) for t in servers)]
            hosts += [server_hosts.get(t.name, "") for t in servers]
            names = [f"{layout.role_label(t)} {t.type}:{t.index}" for t in tasks]
            publish_display_data(tf_config_bundle(configs, hosts, names))
        else:
            publish_display_data(tf_config_bundle(cluster.tf_configs, hosts))
        if not self._security_notice_shown:
            self._security_notice_shown = True
            spec = cluster.spec
            # every task's port (chief, workers, parameter servers), not only the cell kernels'
            # A warning goes to stderr; the all-clear of a private namespace is plain information.
            print(security_notice(cluster.addresses, cluster.network_isolated,
                                  remote=spec.remote),
                  file=sys.stdout if cluster.network_isolated else sys.stderr)


def _fan_out(*sinks: EventSink) -> EventSink:
    def deliver(event: Event) -> None:
        for sink in sinks:
            sink(event)
    return deliver


def _parse(parser: argparse.ArgumentParser, line: str) -> argparse.Namespace:
    try:
        return parser.parse_args(shlex.split(line))
    except ValueError as exc:  # unbalanced quotes
        raise UsageError(f"{parser.prog}: cannot parse the options: {exc}") from None


def _spec(ns: argparse.Namespace) -> ClusterSpec:
    try:
        return spec_from_options(ns)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


_Method = TypeVar("_Method", bound=Callable[..., Any])
# IPython's registering decorators are untyped; they return the method they were given.
cell_magic = cast(Callable[[_Method], _Method], ipython_magic.cell_magic)
line_magic = cast(Callable[[_Method], _Method], ipython_magic.line_magic)


@magics_class
class MWMagics(Magics):
    def __init__(self, shell: Any, session: NotebookSession | None = None) -> None:
        super().__init__(shell)  # type: ignore[no-untyped-call]  # IPython's Magics is untyped
        self.session = session or NotebookSession()

    @cell_magic
    def mwtrain(self, line: str, cell: str) -> None:
        ns = _parse_mwtrain_line(line)
        spec = _spec(ns)
        if not cell.strip():
            raise UsageError("%%mwtrain: the cell is empty. Put the training code below the %%mwtrain line.")
        outlets = _outlets(ns)
        profile = _profile_request(ns, self.session.profile)  # its folder checked before anything starts
        if ns.export:
            print(export_job(cell, ns.export, spec, ns.format).summary())
        keras_note = self.session.keras.on_cell(spec.use_legacy_keras)
        if keras_note:
            print(keras_note, file=sys.stderr)
        cluster = self.session.cluster_for(spec)
        kernels = len(spec.layout.cell_tasks())  # a --ps cluster runs the cell in its coordinator only
        names = spec.layout.kernel_names()  # [evaluator], [coordinator]: for the text and the chart
        output = _output_sink(self.shell, kernels, names, ns.show_tf_startup, clears="clear_output" in cell)
        cell_id = front_end_cell_id(self.shell)
        chart = None if ns.no_dashboard else _chart_sink(
            spec, names, self.session.runs.earlier_runs(cell_hash(cell), ns.compare, cell_id), ns.compare_saved)
        measured = RunCollector()  # the run history's copy of every metric record, whatever the end
        on_event = _fan_out(*([chart] if chart is not None else []), output, measured)
        late_view.begin_cell(self.shell, cluster, output)  # output after the cell: labelled, not lost
        started, error = time.time(), ""
        outcome: Outcome = "failed"
        try:
            if not cluster.started:
                cluster.start()
            self.session.announce(cluster)
            summary: ProfileSummary | None = None
            if profile is not None:  # the same run with TensorFlow's profiler armed: experiments/profile.py
                result, summary = run_profiled(cluster, cell, profile, on_event=on_event, timeout=ns.timeout,
                                               max_restarts=spec.max_restarts, names=names)
            else:
                result = cluster.run(cell, on_event=on_event, timeout=ns.timeout, max_restarts=spec.max_restarts)
            outcome = "ok"
        except MWNotebookError as exc:
            error = one_line(exc)
            if isinstance(exc, ClusterInterrupted):  # Ctrl-C: the workers were interrupted on purpose
                outcome, error = "interrupted", ""
            _finish(output, chart)
            if isinstance(exc, ConfigError):
                raise UsageError(str(exc)) from None
            raise
        except BaseException as exc:  # e.g. a second Ctrl-C: no display update may land in a later cell
            outcome, error = ("interrupted", "") if isinstance(exc, KeyboardInterrupt) else (
                "failed", one_line(exc))
            _finish(output, chart)
            raise
        else:
            _finish(output, chart)
            slow = slow_worker_line(measured.records, names)  # shared/step_times.py
            if slow:
                print(slow)
            if summary is not None:
                self.session.last_profile = summary
                print(summary.text())
        finally:
            run = record_run(self.session.runs, cluster, line=line, cell=cell, started=started, workers=kernels,
                             outcome=outcome, error=error, measured=measured, chart=chart,
                             options=_set_options(ns), cell_id=cell_id)  # frontend/notebook/run_record.py
            runs_view.after_run(self.shell, self.session.runs, run.number, outlets)
        self.session.last_result = result
        # What the cell produced, as plain data in the notebook: mw_result.metrics (records),
        # mw_result.metrics_frame(), mw_result.stdout(i).
        if self.shell is not None:
            self.shell.user_ns["mw_result"] = result

    @line_magic
    def mwprofile(self, line: str) -> None:
        """Profile the following %%mwtrain cells, stop, or show the setting (see mwprofile_parser)."""
        ns = _parse(mwprofile_parser(), line)
        if ns.directory is None:
            if ns.steps is not None:
                raise UsageError("%mwprofile --steps needs a folder: %mwprofile DIR --steps A:B")
            setting = self.session.profile
            print(f"mwnotebook: profiling {setting.steps_text} of every %%mwtrain cell into {setting.directory}"
                  if setting is not None else "mwnotebook: profiling is off (%mwprofile DIR turns it on)")
            if self.session.last_profile is not None:
                print(self.session.last_profile.text())
            return
        if ns.directory == "off":
            self.session.profile = None
            print("mwnotebook: profiling off")
            return
        self.session.profile = _checked_profile(ns.directory, ns.steps, "%mwprofile")
        print(f"mwnotebook: the following %%mwtrain cells trace {self.session.profile.steps_text} of every worker "
              f"into {ns.directory} (%mwprofile off to stop)")

    @line_magic
    def mwruns(self, line: str) -> None:
        """The runs of this kernel's %%mwtrain cells (see runs_view.mwruns_parser)."""
        runs_view.mwruns(self.shell, self.session.runs, _parse(mwruns_parser(), line))

    @line_magic
    def mwcluster(self, line: str) -> None:
        ns = _parse(mwcluster_parser(), line)
        if ns.action == "start":
            spec = _spec(ns)
            if spec.coordinator == "notebook":
                start_notebook_coordinator(self.session, spec)
                return
            cluster = self.session.cluster_for(spec)
            if not cluster.started:
                try:
                    cluster.start_background()
                except ConfigError as exc:  # the teacher's caps
                    raise UsageError(str(exc)) from None
                print(f"mwnotebook: starting {cluster.spec.workers} workers in the background; the next "
                      "%%mwtrain with the same options uses them")
            return
        running = self.session.cluster
        if ns.action == "stop":
            here = running is not None and running.spec.coordinator == "notebook" and running.started
            self.session.stop()
            print(notebook_coordinator.stop_note() if here else "mwnotebook: all workers stopped")
        elif ns.action == "status" and running is None:
            print("mwnotebook: no cluster is running (start one with %%mwtrain or %mwcluster start)")
            self._print_caps(None)
        elif running is None:
            print("mwnotebook: no cluster is running (start one with %%mwtrain or %mwcluster start)")
        elif ns.action == "status":
            publish_display_data(status_bundle(running.status(), running.devices()))
            publish_display_data(usage_bundle(running.usage()))  # CPU and memory on each worker's host
            self._print_caps(running)
            job = running.scheduler_status()
            if job:
                print(f"mwnotebook: Slurm job {job['job_id']} ({job['state']}) on {', '.join(job['nodes']) or '-'}")
        elif ns.action == "stacks":
            print(running.stacks().text())
        elif ns.action == "restart":
            moved = running.restart()
            print(f"mwnotebook: restarted {running.spec.workers} workers" + "".join(f"; {m}" for m in moved))


    def _print_caps(self, running: Cluster | None) -> None:
        """The teacher's caps under the status, with what this user runs against them."""
        caps = running.caps if running is not None else self.session.caps()
        text = caps_text(caps, running.thread_defaults if running is not None else {},
                         running_summary(caps))
        if text:
            print(text)


def start_notebook_coordinator(session: NotebookSession, spec: ClusterSpec) -> None:
    """``%mwcluster start --ps P --coordinator notebook``: the servers, then this kernel joins.

    Blocking (the next cell's ``mw.ps_strategy()`` needs the servers up). A second cluster in this
    kernel is refused before anything (the running cluster too) is touched."""
    running = session.cluster
    if running is not None and running.spec == spec and running.started:
        print("mwnotebook: this kernel is already the coordinator of a cluster with these options")
        return
    refused = notebook_coordinator.refusal(spec.force)
    if refused is not None:
        raise UsageError(f"%mwcluster start: {refused}")
    keras_note = session.keras.on_cell(spec.use_legacy_keras)
    if keras_note:
        print(keras_note, file=sys.stderr)
    if spec.force and notebook_coordinator.strategies_made():
        print("mwnotebook: --force: connecting this kernel to a second cluster. The first one's gRPC server "
              "keeps listening, and its strategy, coordinator and variables must not be touched again "
              "(that crashed the process in our measurements)", file=sys.stderr)
    cluster = session.cluster_for(spec)
    try:
        cluster.start()
    except ConfigError as exc:  # the teacher's caps
        raise UsageError(f"%mwcluster start: {exc}") from None
    print(cluster.notebook_notice, file=sys.stderr)


def _output_sink(shell: Any, num_workers: int, names: WorkerNames, show_startup: bool,
                 clears: bool = False) -> EventSink:
    """Per-worker output areas where a frontend draws displays (a Jupyter kernel); labelled text
    lines elsewhere (a terminal IPython, tests). ``clears``: the cell calls clear_output."""
    show = True if show_startup else None  # None: the environment's default
    if getattr(shell, "kernel", None) is not None:
        return WorkerOutputAreas(num_workers, show_startup=show, areas_from_start=clears, names=names)
    return TextRelay(sys.stdout, sys.stderr, display=lambda d, m: publish_display_data(d, m), show_startup=show,
                     num_workers=num_workers, names=names)


def front_end_cell_id(shell: Any) -> str | None:
    """The id JupyterLab and Notebook 7 send with the running cell (``metadata.cellId`` of the
    execute request); None outside a Jupyter kernel or when the front end sent none."""
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return None
    try:
        cell_id = kernel.get_parent().get("metadata", {}).get("cellId")
    except (AttributeError, TypeError):  # an older ipykernel without get_parent, or no request
        return None
    return cell_id if isinstance(cell_id, str) and cell_id else None


def _chart_sink(spec: ClusterSpec, names: WorkerNames, earlier: Sequence[RunRecord] = (),
                earlier_in_picture: bool = False) -> ChartOnFirstMetric:
    """The cell's live chart; under --ps with a line per worker server too (frontend/chart/lines.py);
    ``earlier``: the cell's earlier runs (latest first), drawn faintly from their chart snapshots."""
    from mwnotebook.frontend.chart.lines import chart_lines  # the chart's modules load on first use

    lines = chart_lines(spec.layout, names)
    return ChartOnFirstMetric(lines.kernels, lines=lines, earlier_runs=[(r.number, r.chart) for r in earlier],
                              earlier_in_picture=earlier_in_picture)


def _run_count(text: str) -> int:
    """``--compare N``: a whole number of runs, 0 or more."""
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of runs: give 0 (none) or more, e.g. --compare 3")
    return count


def _checked_profile(directory: str, steps: str | None, prog: str) -> ProfileRequest:
    try:
        request = ProfileRequest.of(directory, steps)
        request.check()
    except ConfigError as exc:
        raise UsageError(f"{prog}: {exc}") from None
    return request


def _profile_request(ns: argparse.Namespace, session_default: ProfileRequest | None) -> ProfileRequest | None:
    """The cell's ``--profile`` (checked now; ``--profile-steps`` alone: the split without a trace), else
    ``%mwprofile``'s setting, else None."""
    if ns.profile is None:
        if ns.profile_steps is not None:  # the window's split only, no TensorFlow profiler
            return _checked_profile("", ns.profile_steps, "%%mwtrain")
        if session_default is not None:  # the folder may have gone since %mwprofile
            return _checked_profile(session_default.directory, f"{session_default.first}:{session_default.last}",
                                    "%%mwtrain (%mwprofile)")
        return session_default
    return _checked_profile(ns.profile, ns.profile_steps, "%%mwtrain")


def _outlets(ns: argparse.Namespace) -> Outlets:
    """Where the run goes besides the history; what cannot work here is refused before anything starts."""
    outlets = Outlets(tensorboard=ns.tensorboard, mlflow=ns.mlflow)
    try:
        outlets.check()
    except ConfigError as exc:
        raise UsageError(f"%%mwtrain: {exc}") from None
    return outlets


_defaults: dict[str, Any] = {}


def _set_options(ns: argparse.Namespace) -> dict[str, str]:
    """The options the line set (those that differ from the parser's defaults), as text."""
    if not _defaults:
        _defaults.update(vars(_cached_mwtrain_parser().parse_args([])))
    return set_options(vars(ns), _defaults)


def _finish(output: EventSink, chart: ChartOnFirstMetric | None) -> None:
    """Last state of the output and the chart, however the run ended."""
    if isinstance(output, WorkerOutputAreas):
        output.finish()
    elif isinstance(output, TextRelay):
        output.flush()
    if chart is not None:
        chart.finish()


_magics: MWMagics | None = None


def register(ipython: Any) -> None:
    global _magics
    _magics = MWMagics(ipython, NotebookSession(runs=_run_history(ipython)))
    MWMagics.mwtrain.__doc__ = mwtrain_parser().format_help()
    MWMagics.mwcluster.__doc__ = mwcluster_parser().format_help()
    MWMagics.mwruns.__doc__ = mwruns_parser().format_help()
    MWMagics.mwprofile.__doc__ = mwprofile_parser().format_help()
    ipython.register_magics(_magics)
    runs_view.publish(ipython, _magics.session.runs)  # a restarted kernel's earlier runs: mw_runs again
    runs_view.preload_in_background()  # pandas, for mw_runs at the first run's end
    keras_note = _magics.session.keras.on_load()  # before the notebook imports TensorFlow
    if keras_note:
        print(keras_note, file=sys.stderr if "imported" in keras_note else sys.stdout)
    preload_in_background()  # the chart's libraries, so that the first metric does not stall a cell
    from mwnotebook.launchers.ray.prestart import import_ray_in_background, names_ray_cluster

    if names_ray_cluster(os.environ):  # Ray loads while the user types (its clusters are Ray's)
        import_ray_in_background()
    else:
        from mwnotebook.launchers.local.prestart import prestart_in_background  # TF loads while the user types

        prestart_in_background(prestart_env(_cpu_share(_magics.session)))
    from mwnotebook.registry.orphans import sweep_once  # dead kernels' clusters: once per kernel, on a thread

    sweep_once()


def _run_history(shell: Any) -> RunHistory:
    """This kernel's run history: kept beside the kernel's runtime state under the kernel's id (which
    a kernel restart keeps), so the restarted kernel lists its runs again; in memory only where there
    is no Jupyter kernel (a terminal IPython) or its id is not known."""
    if getattr(shell, "kernel", None) is None:
        return RunHistory()
    try:
        from ipykernel.connect import get_connection_file

        kernel = kernel_id(get_connection_file())
    except Exception as exc:  # no kernel app (an embedded shell): nothing to key the file by
        log.debug("run history in memory only: %s", exc)
        kernel = None
    if not kernel:
        return RunHistory()
    store = RunStore.for_kernel(kernel)
    store.remove_stale()  # other kernels' histories untouched for a month
    return RunHistory(store)


def _cpu_share(session: NotebookSession) -> dict[str, str]:
    """The teacher's CPU cap's thread variables for a default cluster ({} without one, or with a bad
    value: the first cell that starts a cluster says what is wrong)."""
    try:
        caps = session.caps()
    except UsageError:
        return {}
    return caps.thread_env(ClusterSpec().workers)


def unregister(ipython: Any) -> None:
    if _magics is not None:
        _magics.session.stop()
