"""tools/kbuild/progress.py: a build prints one short line per compiled file when its compilation starts (not when
it ends, and not the compiler's command line), a line while a file takes long, and a failed build raises with
ninja's last lines. Tried on a toy build.ninja whose "compiler" sleeps."""

import re
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from kbuild import progress  # noqa: E402

NINJA = """rule cc
  command = sleep $delay && {action} #  -c $in -o $out
build {root}/_build/stage/src/a.o: cc {root}/_build/stage/src/a.cpp
  delay = {delay}
build {root}/_build/stage/src/b.o: cc {root}/_build/stage/src/b.cpp
  delay = {delay_b}
"""


class Recorder:
    def __init__(self):
        self.lines = []
        self.start = time.monotonic()

    def write(self, text):
        for line in text.splitlines():
            if line:
                self.lines.append((time.monotonic() - self.start, line))

    def flush(self):
        pass


def _run(tmp_path, monkeypatch, delay, action="cp $in $out", delay_b=None):
    if shutil.which("ninja") is None:
        pytest.skip("ninja not installed (ci/setup.sh installs it)")
    (tmp_path / "_build" / "stage" / "src").mkdir(parents=True)
    for name in ("a", "b"):
        (tmp_path / "_build" / "stage" / "src" / f"{name}.cpp").write_text("int x;\n")
    (tmp_path / "build.ninja").write_text(NINJA.format(delay=delay, delay_b=delay if delay_b is None else delay_b,
                                                          action=action, root=tmp_path))
    monkeypatch.setenv("MAX_JOBS", "1")  # one at a time: b starts when a is done
    rec = Recorder()
    monkeypatch.setattr(sys, "stdout", rec)
    try:
        progress.run_ninja(str(tmp_path), True, "Error compiling objects for extension")
    finally:
        monkeypatch.undo()
    return rec.lines


def test_a_line_per_file_as_it_starts(tmp_path, monkeypatch):
    lines = _run(tmp_path, monkeypatch, delay=2)
    texts = [t for _, t in lines]
    assert texts == ["kbuild: [1/2] compiling src/a.cpp", "kbuild: [2/2] compiling src/b.cpp"], texts
    t_a, t_b = lines[0][0], lines[1][0]
    assert t_a < 1.5, f"a's line came {t_a:.1f} s in: after its 2 s compilation, not at its start"
    assert 1.5 < t_b < 3.5, f"b starts when a is done (~2 s), its line came at {t_b:.1f} s"


def test_a_line_while_a_file_takes_long(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "STILL_COMPILING_EVERY_S", 2.0)  # 20 s in a real build
    lines = _run(tmp_path, monkeypatch, delay=5, delay_b=0)
    assert any(re.fullmatch(r"kbuild: still compiling src/a\.cpp \([234] s\)", t) for _, t in lines), lines


def test_a_failed_build_raises_with_ninjas_lines(tmp_path, monkeypatch):
    with pytest.raises(RuntimeError, match="Error compiling objects for extension: ninja exited with status 1") as info:
        _run(tmp_path, monkeypatch, delay=0, action="echo 'a.cpp:1: error: no good' && false")
    assert "a.cpp:1: error: no good" in str(info.value)
