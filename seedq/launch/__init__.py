"""Starting processes on hosts: actor processes here (``actors.py``), on other machines over
ssh (``ssh.py``) or as Slurm job steps (``slurm.py``), with the pieces they share
(``remote_actor.py``, ``remote_guard.py``, ``remote_keys.py``, ``host_check.py``), the sizing
of a run to the machine's cores (``sizing.py``) and of sweep jobs that share one
(``sharing.py``). How a run is wired is ``seedq.arch``'s.
"""

from __future__ import annotations

import importlib
from typing import Any

# Launchers whose actors run elsewhere, by ``launcher.name``: each class checks its hosts in
# ``for_run(cfg, run_dir)`` and spawns actors there (imported only when chosen).
REMOTE_LAUNCHERS = {
    "ssh": "seedq.launch.ssh:SshLauncher",
    "slurm": "seedq.launch.slurm:SlurmLauncher",
}


def remote_launcher(cfg: Any, run_dir: str) -> Any | None:
    """The checked remote launcher of ``cfg.launcher.name``, or None for local actors."""
    path = REMOTE_LAUNCHERS.get(cfg.launcher.name)
    if path is None:
        return None
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name).for_run(cfg, run_dir)
