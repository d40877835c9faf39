"""V-trace in PPO's regime takes PPO's update, to rounding.

On data its own weights acted (every importance weight 1), with the targets fixed per batch and
the policy gradient bootstrapped as rlax has it (``pg_bootstrap=lambda``), V-trace's targets
are GAE's (`test_vtrace.test_on_policy_lambda_pg_advantage_is_gae_and_the_papers_is_not`), and
its loss is PPO's clipped surrogate, value term and entropy bonus. So the two learners, given
the same weights and the same batch, must leave the same weights behind: any hidden factor
between them (a loss scale, the PopArt order, the gradient clip, the optimizer's settings)
shows here. docs/results.md used this to tell the regime from the algorithm on Pong.
"""

import dataclasses
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_learner_glue import GAMMA, vtrace_batch, vtrace_config

from seedq.agents.common.update import Placement
from seedq.agents.ppo.config import PPOConfig
from seedq.agents.ppo.learner import PPOLearner
from seedq.agents.ppo.network import build_network as build_ppo
from seedq.agents.vtrace.agent import VTraceAgent
from seedq.agents.vtrace.learner import VTraceLearner
from seedq.messages import EnvSpec

CPU = torch.device("cpu")
SPEC = EnvSpec((3,), "float32", 3)


def _learners(epochs: int, value_norm: bool, pg_bootstrap: str):
    """A V-trace and a PPO learner in one regime, their networks holding the same weights."""
    vtrace_cfg = dataclasses.replace(
        vtrace_config(),
        value_norm=value_norm,
        fixed_targets=True,
        pg_bootstrap=pg_bootstrap,
        minibatches=1,
        epochs=epochs,
        clip_eps=0.1,
        normalize_advantages=True,
        grad_clip=0.5,
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0,
    )
    ppo_cfg = PPOConfig(
        gamma=GAMMA,
        gae_lambda=vtrace_cfg.lambda_,
        reward_scaling=False,
        reward_clip="none",
        value_norm=value_norm,
        shared_body=True,
        minibatches=1,
        epochs=epochs,
        clip_eps=0.1,
        value_cost=vtrace_cfg.baseline_cost,
        entropy_cost=vtrace_cfg.entropy_cost,
        grad_clip=0.5,
        lr=vtrace_cfg.lr,
        adam_eps=vtrace_cfg.adam_eps,
    )
    torch.manual_seed(3)
    alg = SimpleNamespace(**dataclasses.asdict(vtrace_cfg))
    alg.model = SimpleNamespace(**alg.model)
    vtrace_model = VTraceAgent.build_model(SPEC, alg, channels_last=False)
    ppo_model = build_ppo(SPEC, ppo_cfg, channels_last=False)
    # The same layers in the same order: body, policy head, value head.
    pairs = list(zip(vtrace_model.parameters(), ppo_model.parameters(), strict=True))
    with torch.no_grad():
        for mine, theirs in pairs:
            theirs.copy_(mine)
    vtrace = VTraceLearner(
        vtrace_model, vtrace_cfg, Placement(CPU, threading.Lock()), total_env_steps=10**6
    )
    ppo = PPOLearner(ppo_model, ppo_cfg, Placement(CPU, threading.Lock()), total_env_steps=10**6)
    return vtrace, ppo


def _on_policy(batch, model: torch.nn.Module):
    """``batch`` with the behaviour logits the model gives its observations (as acting paused
    during the update leaves them)."""
    with torch.no_grad():
        out, _ = model(torch.as_tensor(batch.obs), torch.as_tensor(batch.done), ())
    behaviour = out.logits.numpy().copy()
    behaviour[-1] = np.nan  # the bootstrap row's: never read
    return dataclasses.replace(batch, behaviour=behaviour)


@pytest.mark.parametrize("value_norm", [True, False], ids=["popart", "plain"])
@pytest.mark.parametrize("epochs", [1, 4])
def test_vtrace_in_ppos_regime_leaves_ppos_weights(epochs, value_norm):
    vtrace, ppo = _learners(epochs, value_norm, pg_bootstrap="lambda")
    batch = _on_policy(vtrace_batch(), vtrace.model)
    before = [p.detach().clone() for p in vtrace.model.parameters()]

    vtrace_stats, ppo_stats = vtrace.train_batch(batch), ppo.train_batch(batch)

    for name in ("total", "pg", "entropy", "approx_kl", "clip_fraction"):
        assert vtrace_stats[f"loss/{name}"] == pytest.approx(
            ppo_stats[f"loss/{name}"], rel=1e-5, abs=1e-7
        ), name
    assert vtrace_stats["loss/baseline"] == pytest.approx(ppo_stats["loss/value"], rel=1e-5)
    for mine, theirs, start in zip(
        vtrace.model.parameters(), ppo.model.parameters(), before, strict=True
    ):
        assert not torch.equal(mine, start)
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


def test_the_papers_policy_gradient_bootstrap_leaves_other_weights():
    """The check can fail: with the paper's bootstrap (``vs``) the advantages differ from
    GAE's, and so do the weights after one update."""
    vtrace, ppo = _learners(1, True, pg_bootstrap="vs")
    batch = _on_policy(vtrace_batch(), vtrace.model)

    vtrace.train_batch(batch)
    ppo.train_batch(batch)

    gaps = [
        float((mine - theirs).detach().abs().max())
        for mine, theirs in zip(vtrace.model.parameters(), ppo.model.parameters(), strict=True)
    ]
    assert max(gaps) > 1e-4
