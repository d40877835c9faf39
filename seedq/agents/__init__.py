"""One package per algorithm behind one small protocol (see :mod:`seedq.agents.base`).

``seedq.agents.registry`` lists them; nothing here imports torch, so configs compose without it.
"""
