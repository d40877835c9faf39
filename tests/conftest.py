"""Shared test setup: one torch thread, so tests behave alike on a loaded 2-core box."""

import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a CUDA device: skipped here without one (scripts/gpu_check.sh
    runs them on a GPU machine with ``pytest -m cuda``)."""
    if torch.cuda.is_available():
        return
    import pytest

    skip = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu_check.sh runs these)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
