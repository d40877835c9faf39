"""The types every layer of a run shares, below both the learner runtime and the agents: the
``Agent`` protocol and its ``RunContext``, the ``Unroll``, and the run's counters."""
