"""The quickstart from start to end: a Ray head with the collector, the sample job,
the cluster stopped, then the history server on the same storage until Ctrl-C.

Everything started is registered in :class:`Started` at once, and stopped in reverse
order however the run ends (success, failure, Ctrl-C or SIGTERM)."""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import TextIO

import requests

from runtime.quickstart import history, services, workload
from runtime.quickstart.errors import QuickstartError
from runtime.quickstart.options import QuickstartOptions
from runtime.quickstart.ports import check_ports_free
from runtime.quickstart.processes import ManagedProcess, kill_leftovers, wait_until
from runtime.quickstart.progress import Progress
from runtime.quickstart.ray_auth import RayToken
from runtime.quickstart.sample_job import FAILURE_MESSAGE

logger = logging.getLogger(__name__)

STEPS = 8
#: The collector's own deadline is 25 s; it gets a little more before it is killed.
COLLECTOR_STOP_TIMEOUT = 40.0


@dataclass
class Started:
    """What this run started, so it can all be stopped."""

    temp_dir: Path
    remove_temp_dir: bool
    ray: ManagedProcess | None = None
    collector: ManagedProcess | None = None
    server: ManagedProcess | None = None
    #: Ray's token (in the log directory), removed once Ray is stopped
    ray_token: RayToken | None = None
    notes: list[str] = field(default_factory=list)

    def stop_all(self) -> None:
        if self.server is not None:
            self.server.stop_group(timeout=20)
            self.server = None
        if self.collector is not None:
            self.collector.terminate(timeout=COLLECTOR_STOP_TIMEOUT)
            self.collector = None
        self.stop_ray()

    def stop_ray(self) -> None:
        if self.ray is not None:
            # Ray's own graceful stop waits ~30 s for idle workers; the collector has
            # already uploaded everything, so the head gets a few seconds, then SIGKILL.
            self.ray.stop_group(timeout=5)
            self.ray = None
        # Ray daemons that left the head's process group (none expected) still name the temp dir.
        if (leftovers := kill_leftovers(str(self.temp_dir))) > 0:
            logger.warning("stopped %d Ray processes that outlived the head", leftovers)
        if self.ray_token is not None:
            self.ray_token.remove()
            self.ray_token = None
        if self.remove_temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def _display_host(host: str) -> str:
    return "localhost" if host in ("0.0.0.0", "::", "") else host  # noqa: S104 - only for display


class Quickstart:
    def __init__(self, options: QuickstartOptions, out: TextIO = sys.stdout) -> None:
        self.options = options
        self.progress = Progress(out, STEPS)
        self.base_url = f"http://{_display_host(options.host)}:{options.server_port}"
        temp = options.ray_temp_dir
        self.started = Started(
            temp_dir=temp or Path(tempfile.mkdtemp(prefix="rayqs-", dir="/tmp")),
            remove_temp_dir=temp is None,
        )
        self.log_dir = Path(f"{self.started.temp_dir}-logs")
        self.layout = services.RayLayout(self.started.temp_dir, options.gcs_port, options.dashboard_port)

    # ---------------------------------------------------------------- steps
    def run(self) -> int:
        """Everything up to the printed URLs; then serve, unless --no-serve."""
        opts = self.options
        say = self.progress.say
        say(f"Ray History Server quickstart: cluster {opts.namespace}/{opts.cluster_name}, storage {opts.storage_dir}")
        with self.progress.step("Checking ports and storage") as step:
            check_ports_free(opts.ports_by_flag())
            opts.storage_dir.mkdir(parents=True, exist_ok=True)
            self.started.temp_dir.mkdir(parents=True, exist_ok=True)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            step.detail = ", ".join(f"{port} free" for port in opts.ports_by_flag().values())
        session = self._start_ray()
        self._start_collector()
        job = self._run_sample_job()
        self._stop_collector()
        with self.progress.step("Stopping Ray: the cluster is gone") as step:
            self.started.stop_ray()
            step.detail = "only the storage is left"
        self._start_history_server()
        failed_task = self._open_session(session, job)
        self._print_urls(session, job, failed_task)
        if not opts.serve:
            self.started.stop_all()
            say("Stopped (--no-serve). Run again without it to keep the history server up.")
            return 0
        say(f"Serving until Ctrl-C (history server log: {self.log_dir / 'historyserver.log'}).")
        self._serve_until_stopped()
        return 0

    def _start_ray(self) -> str:
        opts = self.options
        with self.progress.step(
            f"Starting a Ray head (GCS :{opts.gcs_port}, dashboard :{opts.dashboard_port})"
        ) as step:
            self.started.ray_token = RayToken.create(self.log_dir)
            ray = services.ray_head(opts, self.layout, self.log_dir / "ray-start.log", self.started.ray_token)
            self.started.ray = ray
            ray.start()
            if not wait_until(self._ray_up, opts.ray_start_timeout, interval=0.5):
                raise QuickstartError(
                    self._ray_failure(f"the Ray dashboard did not answer in {opts.ray_start_timeout:.0f} s")
                )
            session = self.layout.session_dir().name
            step.detail = session
        return session

    def _ray_up(self) -> bool:
        ray = self.started.ray
        if ray is not None and (code := ray.exit_code()) is not None:
            raise QuickstartError(self._ray_failure(f"`ray start` exited with {code}"))
        try:
            url = f"{self.layout.dashboard_url}/api/version"
            return requests.get(url, headers=self._ray_headers(), timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def _ray_token(self) -> RayToken:
        if (token := self.started.ray_token) is None:
            raise QuickstartError("internal: Ray's token was not created")
        return token

    def _ray_headers(self) -> dict[str, str]:
        return self._ray_token().headers()

    def _ray_failure(self, what: str) -> str:
        ray_log = self.log_dir / "ray-start.log"
        text = [f"Ray could not start: {what}.", f"--- last lines of {ray_log} ---"]
        text.append(self.started.ray.log_tail(30) if self.started.ray else "")
        session_logs = self.started.temp_dir / "session_latest" / "logs"
        if session_logs.exists():
            text.append(f"--- more in {session_logs} (dashboard.log, raylet.err, gcs_server.err) ---")
        return "\n".join(text)

    def _start_collector(self) -> None:
        opts = self.options
        collector_url = f"http://{services.LOOPBACK}:{opts.events_port}"
        with self.progress.step(f"Starting the collector beside it (events :{opts.events_port})") as step:
            collector = services.collector(opts, self.layout, self.log_dir / "collector.log", self._ray_token())
            self.started.collector = collector
            collector.start()

            def healthy() -> bool:
                if (code := collector.exit_code()) is not None:
                    raise QuickstartError(f"the collector exited with {code}:\n{collector.log_tail()}")
                try:
                    return requests.get(f"{collector_url}/healthz", timeout=2).status_code == 200
                except requests.RequestException:
                    return False

            if not wait_until(healthy, 30):
                raise QuickstartError(f"the collector did not answer {collector_url}/healthz:\n{collector.log_tail()}")
            step.detail = f"storage local, {opts.storage_dir}"

    def _run_sample_job(self) -> workload.JobResult:
        submission_id = "quickstart-" + datetime.now().strftime("%Y%m%d-%H%M%S")
        with self.progress.step(f"Running the sample job {submission_id}") as step:
            url, headers = self.layout.dashboard_url, self._ray_headers()
            workload.submit_sample_job(url, submission_id, headers=headers)
            job = workload.wait_for_job(url, submission_id, self.options.job_timeout, headers=headers)
            text = workload.failure_text(url, job, FAILURE_MESSAGE, headers=headers)
            expected = job.status == "FAILED" and FAILURE_MESSAGE in text
            step.detail = f"{job.status}" + (" as intended: " if expected else ": ") + workload.short_error(text)
        return job

    def _stop_collector(self) -> None:
        collector = self.started.collector
        if collector is None:
            raise QuickstartError("internal: the collector was not started")
        with self.progress.step("Stopping the collector (SIGTERM: it uploads everything)") as step:
            events = workload.wait_for_events_to_settle(f"http://{services.LOOPBACK}:{self.options.events_port}")
            code = collector.terminate(timeout=COLLECTOR_STOP_TIMEOUT)
            self.started.collector = None
            if code != 0:
                raise QuickstartError(f"the collector did not shut down cleanly (exit {code}):\n{collector.log_tail()}")
            step.detail = f"{events:.0f} events stored"

    def _start_history_server(self) -> None:
        opts = self.options
        with self.progress.step(f"Starting the history server on :{opts.server_port}") as step:
            server = services.history_server(opts, self.log_dir / "historyserver.log")
            self.started.server = server
            server.start()
            history.wait_until_ready(f"http://{services.LOOPBACK}:{opts.server_port}", server)
            step.detail = f"storage local, {opts.storage_dir}"

    def _open_session(self, session: str, job: workload.JobResult) -> dict[str, object] | None:
        opts = self.options
        url = f"http://{services.LOOPBACK}:{opts.server_port}"
        with self.progress.step("Opening the stored session (indexing its events)") as step:
            client = history.enter_session(url, opts.namespace, opts.cluster_name, session)
            failed = [t for t in history.failed_tasks(client, url) if t.get("job_id") == job.job_id]
            sessions = history.stored_session_names(url, opts.namespace, opts.cluster_name)
            step.detail = f"{len(failed)} failed task(s); {len(sessions)} stored session(s) of {opts.cluster_name}"
        return failed[0] if failed else None

    def _print_urls(self, session: str, job: workload.JobResult, failed_task: dict[str, object] | None) -> None:
        opts, say, base = self.options, self.progress.say, self.base_url
        say()
        say(f"Done in {self.progress.elapsed():.0f} s. The Ray cluster is gone; its Dashboard is served from storage.")
        say()
        dashboard = base + history.session_url_path(opts.namespace, opts.cluster_name, session)
        # Session URLs: the session is in the path, so each link works in any browser or tab.
        say(f"  Open the Dashboard:    {dashboard}#/overview")
        if job.job_id:
            say(f"  The failed job:        {dashboard}#/jobs/{job.job_id}")
        if failed_task is not None and job.job_id:
            say(f"  The failed task:       {dashboard}#/jobs/{job.job_id}/tasks/{failed_task['task_id']}")
            error = workload.short_error(str(failed_task.get("error_message") or ""))
            say(f"                         {failed_task.get('name')}: {error}")
        say(f"  Pick any session:      {base}/select_cluster   (click Open on {opts.cluster_name} / {session})")
        say(f"  Ray Dashboard:         {base}/#/overview   (the session picked last in this browser)")
        say()

    def _serve_until_stopped(self) -> None:
        server = self.started.server
        if server is None:
            raise QuickstartError("internal: the history server was not started")
        while server.exit_code() is None:
            time.sleep(0.5)
        raise QuickstartError(f"the history server exited with {server.exit_code()}:\n{server.log_tail()}")


def _raise_keyboard_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_quickstart(options: QuickstartOptions, out: TextIO = sys.stdout) -> int:
    """Run, and stop everything started however it ends. SIGTERM counts as Ctrl-C:
    0 when it ends serving, 130 when it interrupts the set-up."""
    quickstart = Quickstart(options, out)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt) if in_main_thread else None
    try:
        return quickstart.run()
    except KeyboardInterrupt:
        serving = quickstart.started.server is not None and options.serve
        quickstart.progress.say("\nInterrupted: stopping everything the quickstart started ...")
        return 0 if serving else 130
    finally:
        # A second Ctrl-C must not cut the clean-up short and leave Ray running.
        if in_main_thread:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            quickstart.started.stop_all()
        finally:
            if in_main_thread:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
