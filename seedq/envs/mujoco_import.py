"""Importing ``mujoco``: a headless GL picked first, its warnings routed to logging.

Without a display there is no GLFW window, so ``MUJOCO_GL=egl`` (GPU or Mesa's EGL) is set
before MuJoCo is first imported unless ``MUJOCO_GL`` is set already; ``MUJOCO_GL=osmesa``
(software, needs libosmesa6) is the fallback where EGL is missing. Both gymnasium backends
import MuJoCo through here (``env=mujoco``, and a MuJoCo id through ``env=gym``), so this
module sits below them.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from seedq.envs.base import EnvError

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "MuJoCo's envs (env=mujoco, or a MuJoCo id through env=gym) need MuJoCo; "
    "run: pip install 'seedq[mujoco]'"
)


def use_headless_gl() -> None:
    """Pick EGL for MuJoCo's offscreen rendering when no display is set (before ``import
    mujoco``, which reads ``MUJOCO_GL`` once)."""
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"


_warned: set[str] = set()


def _log_mujoco_warning(message: str) -> None:
    # MuJoCo's default handler prints and appends to MUJOCO_LOG.TXT in the working directory,
    # once per env built (MuJoCo 4 warns that gymnasium's models use settotalmass).
    if message not in _warned:
        _warned.add(message)
        logger.warning("MuJoCo: %s", message)


def import_mujoco() -> Any:
    """The ``mujoco`` module (its warnings routed to logging, once each), or an EnvError with
    the install line."""
    use_headless_gl()
    try:
        import mujoco
    except ImportError as exc:
        raise EnvError(INSTALL_HINT) from exc
    mujoco.set_mju_user_warning(_log_mujoco_warning)
    return mujoco
