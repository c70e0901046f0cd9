"""Two tiers, as in the C++ suite: tests marked `gpu` need torch with CUDA and a device (they skip
without one unless GMJIT_REQUIRE_GPU=1, which makes that a failure); the rest need neither."""

import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs torch with CUDA and a GPU")


def require_gpu():
    """torch, imported, when a CUDA device is usable; otherwise a skip (or a failure under
    GMJIT_REQUIRE_GPU=1)."""
    reason = None
    try:
        import torch
        if not torch.cuda.is_available():
            reason = "torch sees no CUDA device"
    except ImportError as e:
        reason = f"no torch: {e}"
    if reason is None:
        return torch
    if os.environ.get("GMJIT_REQUIRE_GPU") == "1":
        pytest.fail(f"GMJIT_REQUIRE_GPU=1 but {reason}")
    pytest.skip(reason)
