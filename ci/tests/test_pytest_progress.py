"""ci/pytest_progress.py (the pytest plugin of ci/test.sh): a line when each test file starts and ends, with its
counts, and while one test runs long a line every 20 s naming it, even though pytest captures the test's output."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_lines_per_file_and_while_a_test_runs_long(tmp_path):
    (tmp_path / "test_quick.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    assert False\n")
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n    print('captured')\n"
                                           "    time.sleep(5)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "ci"), PYTEST_PROGRESS_INTERVAL_S="3")  # 20 s in CI
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_progress",
                             "-o", "console_output_style=classic", "test_quick.py", "test_slow.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stdout[-2000:]
    assert "[pytest] test_quick.py: 2 tests" in lines
    assert "[pytest] test_slow.py: 1 tests" in lines
    assert any(line.startswith("[pytest] test_quick.py: 1 failed, 1 passed, ") for line in lines), lines
    assert any(line.startswith("[pytest] test_slow.py: 1 passed, ") for line in lines), lines
    assert any(re.fullmatch(r"  \.\.\. test_slow\.py::test_slow running for [34] s", line) for line in lines), lines
    assert "captured" not in result.stdout  # the test's own output stays captured
    assert "FAILED test_quick.py::test_b" in result.stdout  # pytest's own report of the failure
