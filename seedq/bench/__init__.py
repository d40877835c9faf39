"""``seedq-bench``: figures for every stage of the pipeline, each printed as a table + JSON line.

* ``raw-env``: the environment alone, stepped with random actions as the actors batch it;
* ``pipeline``: actor processes with a null env and a null policy through the real broker;
* ``inference``: the learner's batched forward pass per model and batch size;
* ``train``: the real training loop for a few seconds;
* ``contention``: copies of ``train`` (or any command) alone, then several at once.
"""
