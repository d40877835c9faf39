"""Refused CURVE handshakes are counted in the metrics (faults/refused_peers) and in
faults.json, with one broker or several broker shards (each shard's guard counts its own)."""

import csv
import json
import signal

import pytest
from fault_helpers import fake_learner, wait_for
from ssh_hosts import free_ports
from test_security import actor_process

from seedq.keys import create_keys


def refused_in_metrics(run_dir) -> int:
    try:
        with open(run_dir / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return 0
    return max((int(float(r["faults/refused_peers"] or 0)) for r in rows), default=0)


@pytest.mark.parametrize("shards", [1, 2])
def test_a_wrongly_keyed_actor_is_counted_in_the_metrics_and_faults_json(
    tmp_path, keys_dir, shards
):
    port = free_ports(shards)  # shards take port, port + 1
    run_dir = tmp_path / "run"
    learner = fake_learner(
        f"broker.shards={shards}",
        "broker.host=127.0.0.1",
        f"broker.port={port}",
        "security.curve=true",
        f"security.keys_dir={keys_dir}",
        "max_minutes=3",
        f"run_dir={run_dir}",
    )
    create_keys(tmp_path / "other_learner")
    stranger = None
    try:
        wait_for(lambda: (run_dir / "metrics.csv").exists(), 120, "the first metrics row")
        stranger = actor_process(f"tcp://127.0.0.1:{port}", 9, str(tmp_path / "other_learner"))
        # faults/refused_peers stayed 0 with broker.shards > 1: the shards' guards were not read.
        wait_for(lambda: refused_in_metrics(run_dir) > 0, 60, "a refused handshake counted")
    finally:
        if stranger is not None:
            stranger.kill()
            stranger.wait()
        learner.send_signal(signal.SIGTERM)
        learner.wait(timeout=60)
    # It was not in faults.json at all.
    assert json.loads((run_dir / "faults.json").read_text())["refused_peers"] > 0
