"""ninja with one short line per compiled file, printed when its compilation starts.

torch's BuildExtension runs ``ninja -v``, which reports an edge only once it has finished, as the whole compiler
command line. Here ninja's output is read instead and its compile commands are watched as they start (the
processes ninja spawns, from /proc): each becomes ``kbuild: [n/total] compiling <file>`` (the file relative to the
staged source set), and whatever else ninja or a compiler prints (warnings, errors) passes through. While nothing
else is printed, a line every ``STILL_COMPILING_EVERY_S`` (20 s) names the files still compiling. Where /proc has
no list of a process's children the line comes when the file is done. ``KBUILD_VERBOSE=1`` also prints the full
command lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

_STATUS = re.compile(r"^\[(\d+)/(\d+)\] (.*)$")
_SOURCE = re.compile(r"(?:^| )-c ([^-\s]\S*)")
STILL_COMPILING_EVERY_S = 20.0


def _short(path: str) -> str:
    for marker in ("/_build/stage/", "/stage/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return os.path.basename(path)


def _children(pid: int):
    """The command lines of pid's child processes, or None where /proc cannot list them."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:
        return None
    commands = []
    for kid in kids:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 2 and argv[1] == b"-c":  # ninja runs each command as `/bin/sh -c "<command>"`
            argv = argv[2:3]
        commands.append(b" ".join(argv).decode("utf-8", "replace"))
    return commands


def run_ninja(build_directory: str, verbose: bool, error_prefix: str) -> None:
    """Drop-in for torch.utils.cpp_extension._run_ninja_build (MAX_JOBS sets the parallelism, as there)."""
    jobs = os.environ.get("MAX_JOBS", "")
    command = ["ninja", "-v"] + (["-j", jobs] if jobs.isdigit() else [])
    show_commands = os.environ.get("KBUILD_VERBOSE") == "1"
    dry = subprocess.run(["ninja", "-n"], cwd=build_directory, capture_output=True, text=True,
                         env=dict(os.environ, NINJA_STATUS="[%t] "))
    total = next((m.group(1) for m in re.finditer(r"^\[(\d+)\] ", dry.stdout, re.M)), "?")
    sys.stdout.flush()
    sys.stderr.flush()
    proc = subprocess.Popen(command, cwd=build_directory, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    lock = threading.Lock()
    announced = set()
    last_line = [time.monotonic()]
    tail = []  # the last lines of ninja's output that are not its status lines, for the error message

    def announce(cmd: str) -> None:
        src = _SOURCE.search(cmd)
        if src is None:
            return
        with lock:
            if src.group(1) in announced:
                return
            announced.add(src.group(1))
            print(f"kbuild: [{len(announced)}/{total}] compiling {_short(src.group(1))}", flush=True)
            last_line[0] = time.monotonic()

    watching = _children(proc.pid) is not None

    def watch() -> None:
        start = time.monotonic()
        while proc.poll() is None:
            running = _children(proc.pid) or []
            for cmd in running:
                announce(cmd)
            if time.monotonic() - last_line[0] >= STILL_COMPILING_EVERY_S:
                names = [_short(m.group(1)) for m in map(_SOURCE.search, running) if m]
                with lock:
                    print(f"kbuild: still compiling {', '.join(names) or '...'} ({time.monotonic() - start:.0f} s)",
                          flush=True)
                    last_line[0] = time.monotonic()
            time.sleep(0.25)

    watcher = threading.Thread(target=watch, daemon=True)
    if watching:
        watcher.start()
    for line in proc.stdout:
        line = line.rstrip()
        m = _STATUS.match(line)
        if m is None:
            if line:
                with lock:
                    print(line, flush=True)
                    last_line[0] = time.monotonic()
                tail.append(line)
                del tail[:-40]
            continue
        announce(m.group(3))  # started too briefly to be seen, or no /proc
        if show_commands:
            print(m.group(3), flush=True)
    status = proc.wait()
    if watching:
        watcher.join()
    if status != 0:
        raise RuntimeError(f"{error_prefix}: ninja exited with status {status}; its last lines:\n" + "\n".join(tail))
