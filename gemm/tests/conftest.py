import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

# reference.py sits beside the tests; make it importable however pytest was started.
_TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _TESTS)

# `import gemm` must find the installed kernel package. From the repository root the kernel *directory*
# gemm/ would shadow it as a namespace package, and from inside it the HIP source folder gemm/gemm/
# would: drop both entries (and the current directory when it is one of them).
_SHADOWING = {os.path.dirname(_TESTS), os.path.dirname(os.path.dirname(_TESTS))}
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in _SHADOWING]

# CI runs a fixed number of examples without deadlines (timings on shared 2-core runners vary);
# GEMM_HYPOTHESIS_EXAMPLES raises it for a longer local soak.
settings.register_profile(
    "gemm",
    max_examples=int(os.environ.get("GEMM_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # Fresh random draws on every run; GEMM_HYPOTHESIS_DERANDOMIZE=1 replays a fixed sequence.
    derandomize=os.environ.get("GEMM_HYPOTHESIS_DERANDOMIZE", "0") == "1",
)
settings.load_profile("gemm")


@pytest.fixture
def restore_num_threads():
    threads = torch.get_num_threads()
    yield threads
    torch.set_num_threads(threads)
