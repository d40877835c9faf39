"""Shared test setup: one torch thread, so tests behave alike on a loaded 2-core box."""

import pytest
import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a CUDA device: skipped here without one (scripts/gpu_check.sh
    runs them on a GPU machine with ``pytest -m cuda``)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (scripts/gpu_check.sh runs these)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory) -> str:
    """A learner's CURVE keys dir (seedq-keys), one per test module that asks for it."""
    from seedq.keys import create_keys

    directory = tmp_path_factory.mktemp("keys")
    create_keys(directory)
    return str(directory)
