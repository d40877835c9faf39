"""seedq: SEED RL-style distributed reinforcement learning in PyTorch."""

from typing import Any

__all__ = ["load_policy"]


def __getattr__(name: str) -> Any:
    # Lazy, so that actor processes importing seedq.actor never load torch.
    if name == "load_policy":
        from seedq.trained_policy import load_policy

        return load_policy
    raise AttributeError(f"module 'seedq' has no attribute {name!r}")
