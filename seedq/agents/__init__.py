"""One package per algorithm behind one small protocol (see :mod:`seedq.core.agent`).

``seedq.agents.registry`` lists them; nothing here imports torch, so configs compose without it.
"""
