"""Shared test setup: one torch thread, so tests behave alike on a loaded 2-core box."""

import torch

torch.set_num_threads(1)
