"""pytest plugin for ci/test.sh (`-p pytest_progress` with ci/ on PYTHONPATH): progress lines instead of dots.

One line when a test file starts and one when it ends (counts and time); inside a file a line at least every
20 s (tests done so far), and while a single test runs longer than that, a line every 20 s naming it
($PYTEST_PROGRESS_INTERVAL_S sets the 20). So no stretch of a long run is silent, and the log says which file
took the time. Failures and errors keep pytest's own report at the end.
"""

import os
import threading
import time

import pytest

INTERVAL = float(os.environ.get("PYTEST_PROGRESS_INTERVAL_S", "20"))
# The terminal as it is when `-p` imports this module, before pytest captures fd 1 around each test: the line the
# background thread prints while a long test runs must not land in that test's captured output.
try:
    _TERMINAL_FD = os.dup(1)
except OSError:
    _TERMINAL_FD = None


class Progress:
    def __init__(self, config):
        self.config = config
        self.writer = config.get_terminal_writer()
        self.lock = threading.Lock()
        self.per_file = {}
        self.paths = {}  # nodeid -> file, relative to where pytest was started
        self.file = None
        self.file_start = self.last_line = time.monotonic()
        self.done = {}
        self.current = None
        self.current_start = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._heartbeat, daemon=True)

    def line(self, text):
        with self.lock:
            if getattr(self.writer, "width_of_current_line", 0):  # after a failure's letter
                self.writer.line("")
            self.writer.line(text)
            self.writer.flush()
            self.last_line = time.monotonic()

    def _heartbeat(self):
        while not self.stop.wait(min(2.0, INTERVAL / 2)):
            now = time.monotonic()
            current = self.current
            if current is not None and now - self.last_line >= INTERVAL and now - self.current_start >= INTERVAL:
                text = f"  ... {current} running for {now - self.current_start:.0f} s"
                with self.lock:
                    if _TERMINAL_FD is None:
                        self.writer.line(text)
                        self.writer.flush()
                    else:
                        os.write(_TERMINAL_FD, (text + "\n").encode())
                    self.last_line = time.monotonic()

    def _finish_file(self):
        if self.file is None:
            return
        counts = self.done.get(self.file, {})
        parts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        self.line(f"[pytest] {self.file}: {parts or 'nothing run'}, {time.monotonic() - self.file_start:.1f} s")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        cwd = session.config.invocation_params.dir
        for item in session.items:
            path = os.path.relpath(item.path, cwd)
            self.paths[item.nodeid] = path
            self.per_file[path] = self.per_file.get(path, 0) + 1
        self.thread.start()

    def pytest_runtest_logstart(self, nodeid, location):
        path = self.paths.get(nodeid, location[0])
        if path != self.file:
            self._finish_file()
            self.file, self.file_start = path, time.monotonic()
            self.line(f"[pytest] {path}: {self.per_file.get(path, '?')} tests")
        self.current, self.current_start = nodeid, time.monotonic()

    def pytest_runtest_logreport(self, report):
        path = self.paths.get(report.nodeid, report.location[0])
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            outcome = "error" if report.when == "setup" and report.failed else report.outcome
            counts = self.done.setdefault(path, {})
            counts[outcome] = counts.get(outcome, 0) + 1
        elif report.when == "teardown" and report.failed:
            counts = self.done.setdefault(path, {})
            counts["error"] = counts.get("error", 0) + 1

    def pytest_runtest_logfinish(self, nodeid, location):
        self.current = None
        now = time.monotonic()
        if now - self.last_line >= INTERVAL:
            path = self.paths.get(nodeid, location[0])
            n = sum(self.done.get(path, {}).values())
            self.line(f"  ... {path}: {n} of {self.per_file.get(path, '?')} done, {now - self.file_start:.0f} s")

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config):
        # No dot per passed or skipped test (the lines above replace them); failures keep their letter.
        if report.when == "call" and report.outcome in ("passed", "skipped"):
            return report.outcome, "", report.outcome.upper()
        if report.when == "setup" and report.skipped:
            return "skipped", "", "SKIPPED"
        return None

    def pytest_sessionfinish(self, session):
        self._finish_file()
        self.stop.set()


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if config.pluginmanager.has_plugin("terminalreporter") and not config.option.collectonly:
        config.pluginmanager.register(Progress(config), "ci-progress")
