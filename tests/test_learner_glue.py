"""What the learners feed their losses: the glue between stored rows and the loss functions.

The loss functions are checked against slow references in test_vtrace.py and
test_r2d2_losses.py; here each learner's ``train_step`` runs on a hand-built batch with a tiny
deterministic model, and what it computes is compared with the reference fed explicitly sliced
numbers. Rows the convention says are unused hold NaN or an impossible action, so a loss that
read them would not be finite.
"""

import copy
import dataclasses
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_vtrace import _lambda_pg_reference, _recursive_reference

from seedq.actor.config import ActorConfig
from seedq.agents.common.normalize import obs_norms, update_obs_norm
from seedq.agents.common.onpolicy import LossMeans
from seedq.agents.common.replay import SampledSequences
from seedq.agents.common.reward_scaler import RewardScaler
from seedq.agents.common.update import Placement, clip_grad_norm
from seedq.agents.config import ModelConfig
from seedq.agents.r2d2.agent import R2D2Agent
from seedq.agents.r2d2.config import QModelConfig, R2D2Config
from seedq.agents.r2d2.loss import n_step_double_q_targets, sequence_priorities
from seedq.agents.r2d2.network import build_network as build_q_network
from seedq.agents.vtrace.config import VTraceConfig
from seedq.agents.vtrace.config import validate as validate_vtrace
from seedq.agents.vtrace.learner import VTraceLearner
from seedq.agents.vtrace.network import AgentOutput
from seedq.config import SeedqConfig
from seedq.core.agent import RunContext
from seedq.core.unroll import Unroll, take_columns
from seedq.envs import FakeConfig
from seedq.messages import EnvSpec
from seedq.schema import ConfigError

CPU = torch.device("cpu")
OBS, ACTIONS = 3, 3

# --- V-trace -------------------------------------------------------------------------------------


class LinearPolicy(torch.nn.Module):
    """logits = obs @ W, V = obs @ v: every number the loss sees is a function of its row."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(OBS, ACTIONS, generator=g, dtype=torch.float64))
        self.v = torch.nn.Parameter(torch.randn(OBS, generator=g, dtype=torch.float64))

    def initial_state(self, batch_size: int, device=None) -> tuple:
        return ()

    def forward(self, obs, done, core_state):
        x = obs.to(torch.float64)
        return AgentOutput(x @ self.w, x @ self.v), ()


GAMMA = 0.9
TRUNCATION_VALUE = 25.0


def vtrace_batch() -> Unroll:
    """T = 4 transitions (5 rows) for B = 2 columns.

    Column 0: obs 3 starts a new episode because the one before was truncated (its final
    observation is worth TRUNCATION_VALUE). Column 1: obs 2 starts a new episode after a
    termination. Row 0's reward and the last row's behaviour and action belong to the
    neighbouring unrolls and are poisoned.
    """
    rng = np.random.default_rng(7)
    rows, cols = 5, 2
    done = np.zeros((rows, cols), bool)
    done[3, 0] = done[2, 1] = True
    truncated = np.zeros((rows, cols), bool)
    truncated[3, 0] = True
    truncation_value = np.zeros((rows, cols), np.float32)
    truncation_value[3, 0] = TRUNCATION_VALUE
    reward = rng.normal(size=(rows, cols)).astype(np.float32)
    reward[0] = np.nan
    # Distinct behaviour logits per row and action: pairing a row with its neighbour's action
    # or logits changes the importance weights.
    behaviour = rng.normal(size=(rows, cols, ACTIONS)).astype(np.float32)
    behaviour[-1] = np.nan
    action = rng.integers(0, ACTIONS, size=(rows, cols)).astype(np.int32)
    action[-1] = ACTIONS  # out of range: must never be gathered
    return Unroll(
        obs=rng.normal(size=(rows, cols, OBS)).astype(np.float32),
        reward=reward,
        done=done,
        truncated=truncated,
        truncation_value=truncation_value,
        action=action,
        behaviour=behaviour,
        core_state=(),
        env_id=np.arange(cols, dtype=np.int64),
    )


def vtrace_config() -> VTraceConfig:
    # No clipping and lambda < 1, so every rho and every row's value reaches the loss.
    return VTraceConfig(
        gamma=GAMMA,
        clip_rho_threshold=None,
        clip_pg_rho_threshold=None,
        lambda_=0.9,
        baseline_cost=0.5,
        entropy_cost=0.01,
        grad_clip=1e6,
        # The reference trains on the rewards as they are; scaling has its own test below.
        reward_scaling=False,
    )


def log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def take(x: np.ndarray, actions: np.ndarray) -> np.ndarray:
    return np.take_along_axis(x, actions[..., None], -1)[..., 0]


def reference_vtrace_terms(model: LinearPolicy, batch: Unroll, cfg: VTraceConfig):
    """The transitions sliced by hand from the rows, and the NumPy reference's targets."""
    w, v = model.w.detach().numpy(), model.v.detach().numpy()
    obs = batch.obs.astype(np.float64)
    logits, values = obs @ w, obs @ v  # [T+1, B, A], [T+1, B]
    actions = batch.action[:-1].astype(np.int64)
    rewards = batch.reward[1:] + cfg.gamma * batch.truncation_value[1:] * batch.truncated[1:]
    discounts = cfg.gamma * (~batch.done[1:])
    log_rhos = take(log_softmax(logits[:-1]), actions) - take(
        log_softmax(batch.behaviour[:-1].astype(np.float64)), actions
    )
    vs, pg_adv = _recursive_reference(
        log_rhos, discounts, rewards, values[:-1], values[-1], None, None, cfg.lambda_
    )
    if cfg.pg_bootstrap == "lambda":
        pg_adv = _lambda_pg_reference(
            vs, log_rhos, discounts, rewards, values[:-1], values[-1], None, cfg.lambda_
        )
    return logits[:-1], actions, vs, pg_adv


def reference_vtrace_loss(model: LinearPolicy, batch: Unroll, cfg: VTraceConfig):
    """``(total, pg, baseline, entropy)`` as differentiable tensors of ``model``'s weights,
    with the targets as constants from the NumPy reference."""
    _, actions, vs, pg_adv = reference_vtrace_terms(model, batch, cfg)
    obs = torch.from_numpy(batch.obs[:-1].astype(np.float64))
    log_probs = F.log_softmax(obs @ model.w, -1)
    taken = log_probs.gather(-1, torch.from_numpy(actions)[..., None])[..., 0]
    pg = -(taken * torch.from_numpy(pg_adv)).mean()
    baseline = cfg.baseline_cost * 0.5 * (torch.from_numpy(vs) - obs @ model.v).pow(2).mean()
    entropy = cfg.entropy_cost * (log_probs.exp() * log_probs).sum(-1).mean()
    return pg + baseline + entropy, pg, baseline, entropy


def vtrace_learner(model: torch.nn.Module, cfg: VTraceConfig, **kw) -> VTraceLearner:
    return VTraceLearner(model, cfg, Placement(CPU, threading.Lock(), **kw), total_env_steps=1000)


@pytest.mark.parametrize("pg_bootstrap", ["vs", "lambda"])
def test_vtrace_loss_is_the_reference_on_the_rows_sliced_by_the_convention(pg_bootstrap):
    model, batch, cfg = LinearPolicy(), vtrace_batch(), vtrace_config()
    cfg.pg_bootstrap = pg_bootstrap
    loss = vtrace_learner(model, cfg).loss(batch)
    expected = reference_vtrace_loss(model, batch, cfg)
    np.testing.assert_allclose(
        [float(t.detach()) for t in loss[:4]], [float(t.detach()) for t in expected], rtol=1e-5
    )


def test_vtrace_reward_scaling_trains_on_the_scalers_rewards_and_checkpoints_its_state():
    model, batch, cfg = LinearPolicy(), vtrace_batch(), vtrace_config()
    cfg.reward_scaling = True
    learner = vtrace_learner(model, cfg)
    scaled = copy.deepcopy(batch)
    scaled.reward = RewardScaler(cfg.gamma).scale(batch.reward, batch.done, batch.env_id)

    loss = learner.loss(batch)

    expected = reference_vtrace_loss(model, scaled, cfg)
    np.testing.assert_allclose(
        [float(t.detach()) for t in loss[:4]], [float(t.detach()) for t in expected], rtol=1e-5
    )
    restored = vtrace_learner(LinearPolicy(), cfg)
    restored.load_state_dict(learner.state_dict())
    assert restored.reward_scaler.state_dict() == learner.reward_scaler.state_dict()


def test_vtrace_clips_rewards_before_it_scales_them():
    """Clipped as an env wrapper would, then scaled: scaled first, a clip to [-1, 1] undid the
    scaling (every Atari reward of 1 came out as 1 again, whatever the return's std)."""
    model, batch, cfg = LinearPolicy(), vtrace_batch(), vtrace_config()
    batch.reward = batch.reward * 10  # most rewards beyond the clip
    cfg.reward_scaling, cfg.reward_clip = True, "abs_one"
    learner = vtrace_learner(model, cfg)
    scaled = copy.deepcopy(batch)
    scaled.reward = RewardScaler(cfg.gamma).scale(
        np.clip(batch.reward, -1, 1), batch.done, batch.env_id
    )
    assert np.nanmax(np.abs(scaled.reward)) > 1.1  # the scaling shows past the clip

    loss = learner.loss(batch)

    expected = reference_vtrace_loss(model, scaled, dataclasses.replace(cfg, reward_clip="none"))
    np.testing.assert_allclose(
        [float(t.detach()) for t in loss[:4]], [float(t.detach()) for t in expected], rtol=1e-5
    )


def shift_rows(array: np.ndarray) -> np.ndarray:
    """Rows one step late: row t holds what belongs to row t-1."""
    return np.concatenate([array[:1], array[:-1]])


MISALIGNMENTS = {
    "behaviour one row late": lambda b: setattr(b, "behaviour", shift_rows(b.behaviour)),
    "action one row late": lambda b: setattr(b, "action", shift_rows(b.action)),
    "reward one row early": lambda b: setattr(
        b, "reward", np.concatenate([b.reward[1:], np.zeros_like(b.reward[:1])])
    ),
    "truncation bootstrap lost": lambda b: b.truncation_value.fill(0.0),
    "termination ignored": lambda b: b.done.fill(False),
}


@pytest.mark.parametrize("misalign", MISALIGNMENTS.values(), ids=MISALIGNMENTS.keys())
def test_vtrace_loss_differs_from_the_reference_on_misaligned_rows(misalign):
    """The comparison above has teeth: each of these slips would change the loss."""
    model, batch, cfg = LinearPolicy(), vtrace_batch(), vtrace_config()
    wrong = copy.deepcopy(batch)
    misalign(wrong)
    wrong.reward[0], wrong.behaviour[-1], wrong.action[-1] = np.nan, np.nan, ACTIONS
    loss = float(vtrace_learner(model, cfg).loss(batch).total.detach())
    wrong_loss = float(reference_vtrace_loss(model, wrong, cfg)[0].detach())
    assert np.isfinite(wrong_loss) and loss != pytest.approx(wrong_loss, rel=1e-3)


def test_vtrace_train_step_takes_an_adam_step_along_the_reference_gradient():
    model, batch, cfg = LinearPolicy(), vtrace_batch(), vtrace_config()
    reference = copy.deepcopy(model)
    stats = vtrace_learner(model, cfg).train_batch(batch)

    optimizer = torch.optim.Adam(reference.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    total = reference_vtrace_loss(reference, batch, cfg)[0]
    total.backward()
    grad_norm = torch.cat([p.grad.flatten() for p in reference.parameters()]).norm()
    optimizer.step()

    references = dict(reference.named_parameters())
    assert stats["grad_norm"] == pytest.approx(float(grad_norm), rel=1e-5)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, references[name].grad, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(param, references[name], msg=name)


def test_vtrace_minibatch_epochs_step_the_reference_on_each_column_share_in_turn():
    model, batch, cfg = LinearPolicy(), vtrace_batch(), vtrace_config()
    cfg.epochs, cfg.minibatches, cfg.shuffle_transitions = 2, 2, False
    learner = vtrace_learner(model, cfg)
    reference = copy.deepcopy(model)
    optimizer = torch.optim.Adam(reference.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    expected_splits = [
        np.array_split(p, 2)
        for p in (np.random.default_rng(0).permutation(batch.num_columns) for _ in range(2))
    ]

    learner.train_batch(batch)

    for split in expected_splits:
        for cols in split:
            optimizer.zero_grad()
            reference_vtrace_loss(reference, take_columns(batch, cols), cfg)[0].backward()
            optimizer.step()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param, dict(reference.named_parameters())[name], msg=name)


@pytest.mark.parametrize(
    ("fixed_targets", "minibatches", "pg_bootstrap", "proximal"),
    [
        (False, 3, "vs", "behaviour"),
        (True, 3, "vs", "behaviour"),
        (True, 1, "vs", "behaviour"),
        (False, 3, "lambda", "behaviour"),
        (False, 3, "vs", "batch_start"),
        (False, 1, "vs", "batch_start"),
        (True, 3, "vs", "batch_start"),
    ],
    ids=[
        "targets per pass",
        "per batch",
        "per batch, one minibatch",
        "lambda bootstrap",
        "clip against the batch's start",
        "the same, one minibatch",
        "the same, targets per batch",
    ],
)
def test_vtrace_shuffled_minibatches_step_the_reference_on_whole_batch_targets(
    fixed_targets, minibatches, pg_bootstrap, proximal
):
    model, batch, cfg = LinearPolicy(), vtrace_batch(), vtrace_config()
    cfg.pg_bootstrap, cfg.proximal_policy = pg_bootstrap, proximal
    # A rate at which targets recomputed after one full-batch update differ from the first
    # pass's beyond the comparison's tolerance (at 1e-3 they differ by ~3e-8).
    cfg.epochs, cfg.minibatches, cfg.clip_eps, cfg.lr = 3, minibatches, 0.2, 0.05
    cfg.fixed_targets = fixed_targets
    learner = vtrace_learner(model, cfg)
    reference = copy.deepcopy(model)
    optimizer = torch.optim.Adam(reference.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
    rng = np.random.default_rng(0)
    T, B = batch.action.shape[0] - 1, batch.num_columns
    obs = torch.from_numpy(batch.obs[:-1].astype(np.float64)).reshape(T * B, OBS)
    behaviour = log_softmax(batch.behaviour[:-1].astype(np.float64)).reshape(T * B, ACTIONS)
    # With batch_start the clip's ratio is to the policy before the batch's first update.
    start = F.log_softmax(obs @ reference.w, -1).detach().numpy()
    anchor = start if proximal == "batch_start" else behaviour

    learner.train_batch(batch)

    for epoch in range(cfg.epochs):
        # The targets of a pass: the whole batch's, under the weights the pass starts from, or
        # with fixed_targets those the first pass started from.
        if epoch == 0 or not fixed_targets:
            _, actions, vs, pg_adv = reference_vtrace_terms(reference, batch, cfg)
            actions, vs, pg_adv = actions.reshape(-1), vs.reshape(-1), pg_adv.reshape(-1)
        for rows in torch.as_tensor(rng.permutation(T * B)).chunk(cfg.minibatches):
            rows = rows.numpy()
            log_probs = F.log_softmax(obs[rows] @ reference.w, -1)
            taken = log_probs.gather(-1, torch.from_numpy(actions[rows])[:, None])[:, 0]
            ratio = torch.exp(taken - torch.from_numpy(take(anchor[rows], actions[rows])))
            adv = torch.from_numpy(pg_adv[rows])
            pg = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
            values = obs[rows] @ reference.v
            baseline = cfg.baseline_cost * 0.5 * (torch.from_numpy(vs[rows]) - values).pow(2)
            entropy = cfg.entropy_cost * (log_probs.exp() * log_probs).sum(-1)
            optimizer.zero_grad()
            (pg + baseline.mean() + entropy.mean()).backward()
            optimizer.step()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param, dict(reference.named_parameters())[name], msg=name)


class CountingCollective:
    """One rank's collective: counts the gradient averages a batch asks the others to join."""

    world_size = 1

    def __init__(self) -> None:
        self.averages = 0

    def next_turn(self, ready, stopping):
        return ready, stopping

    def average_gradients(self, grads, finite):
        self.averages += 1

    def gather_rows(self, rows):
        return rows


def test_a_stopping_run_ends_a_batch_between_updates_except_where_other_ranks_wait_on_them():
    batch, cfg = vtrace_batch(), vtrace_config()
    cfg.epochs, cfg.minibatches = 2, 2
    stop = threading.Event()
    stop.set()

    alone = vtrace_learner(LinearPolicy(), cfg)
    alone.stop_event = stop
    assert alone.train_batch(batch) == {"skipped": True}

    collective = CountingCollective()
    ranked = vtrace_learner(LinearPolicy(), cfg, collective=collective)
    ranked.stop_event = stop
    stats = ranked.train_batch(batch)
    # Every rank takes all four updates: a rank that left early would hang the others.
    assert "skipped" not in stats and collective.averages == 4


def onpolicy_agent(alg):  # noqa: ANN201 - a VTraceAgent or PPOAgent
    from seedq.agents.registry import agent_class

    run = SeedqConfig(
        env=FakeConfig(obs_shape=[OBS], num_actions=ACTIONS), actor=ActorConfig(num_actors=1)
    )
    run.algorithm = alg
    spec = EnvSpec((OBS,), "float32", ACTIONS)
    return agent_class(alg.name)(RunContext(run, spec, CPU, threading.Lock(), threading.Event()))


@pytest.mark.parametrize("name", ["vtrace", "ppo"])
@pytest.mark.parametrize("pause", [True, False])
def test_pause_acting_holds_the_sink_until_its_batch_is_trained(name, pause):
    """With ``pause_acting`` the sink (central inference's thread) returns only once the batch
    it queued has been trained on, so the next steps are acted by the new weights; without
    it the sink returns as soon as the batch is queued and the envs act on meanwhile."""
    if name == "vtrace":
        alg = VTraceConfig(batch_size=2, pause_acting=pause)
    else:
        from seedq.agents.ppo.config import PPOConfig

        alg = PPOConfig(batch_size=2, unroll_length=4, minibatches=1, pause_acting=pause)
    agent = onpolicy_agent(alg)
    assert agent.pauses_acting is pause
    returned = threading.Event()

    def sink() -> None:
        agent.on_unroll(vtrace_batch())
        returned.set()

    acting = threading.Thread(target=sink)
    acting.start()
    trained_while_waiting = []

    def train_batch(batch: Unroll) -> dict:
        trained_while_waiting.append(not returned.is_set())
        agent.ctx.stop.set()
        return {}

    if pause:
        # Queued but not trained: the sink must still be waiting, however long it is given.
        assert not returned.wait(0.3)
    else:
        assert returned.wait(10)
    agent.learner.train_batch = train_batch
    agent.train(lambda: 0)
    acting.join(10)
    assert returned.is_set() and trained_while_waiting == [pause]


def test_vtrace_reward_scaler_sees_a_batch_once_whatever_the_passes_over_it():
    model, batch, cfg = LinearPolicy(), vtrace_batch(), vtrace_config()
    cfg.reward_scaling, cfg.epochs, cfg.minibatches = True, 3, 2
    learner = vtrace_learner(model, cfg)
    once = RewardScaler(cfg.gamma)
    once.scale(batch.reward, batch.done, batch.env_id)

    learner.train_batch(batch)

    assert learner.reward_scaler.state_dict() == once.state_dict()


def test_vtrace_refuses_more_minibatches_than_env_columns_or_transitions_to_share_out():
    by_column = VTraceConfig(batch_size=4, minibatches=5, shuffle_transitions=False)
    with pytest.raises(ConfigError, match="minibatches=5 exceeds the batch's 4 env columns"):
        validate_vtrace(by_column, None)
    validate_vtrace(VTraceConfig(batch_size=4, minibatches=5), None)  # 80 transitions
    shuffled = VTraceConfig(batch_size=1, unroll_length=2, minibatches=3)
    with pytest.raises(ConfigError, match="minibatches=3 exceeds the batch's 2 transitions"):
        validate_vtrace(shuffled, None)


def test_vtrace_refuses_fixed_targets_where_minibatches_compute_their_own():
    validate_vtrace(VTraceConfig(fixed_targets=True, minibatches=1, epochs=2), None)
    unshuffled = r"needs .*; with algorithm\.shuffle_transitions=false each"
    with pytest.raises(ConfigError, match=unshuffled):
        validate_vtrace(VTraceConfig(fixed_targets=True, shuffle_transitions=False), None)
    lstm = VTraceConfig(fixed_targets=True, model=ModelConfig(use_lstm=True))
    with pytest.raises(ConfigError, match=r"needs .*; with algorithm\.model\.use_lstm=true each"):
        validate_vtrace(lstm, None)


# --- R2D2 ----------------------------------------------------------------------------------------

BURN_IN, LENGTH, BATCH = 3, 4, 2
ROWS = BURN_IN + LENGTH + 1


def r2d2_config(**overrides) -> R2D2Config:
    model = QModelConfig(hidden_sizes=[8], lstm_size=4, head_size=8)
    return R2D2Config(
        burn_in=BURN_IN,
        sequence_length=LENGTH,
        n_step=2,
        gamma=GAMMA,
        batch_size=BATCH,
        grad_clip=1e6,
        model=model,
        **overrides,
    )


def q_network(cfg: R2D2Config, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_q_network((OBS,), ACTIONS, cfg.model, channels_last=False)


def r2d2_sample(weights=(1.0, 0.5)) -> SampledSequences:
    """Two batch-major sequences as the replay returns them. Sequence 0 has a truncated episode
    end inside its trained part, sequence 1 a termination; the stored LSTM state is not zero."""
    rng = np.random.default_rng(3)
    done = np.zeros((BATCH, ROWS), bool)
    truncated = np.zeros((BATCH, ROWS), bool)
    truncation_value = np.zeros((BATCH, ROWS), np.float32)
    done[0, BURN_IN + 2] = truncated[0, BURN_IN + 2] = True
    truncation_value[0, BURN_IN + 2] = TRUNCATION_VALUE
    done[1, BURN_IN + 3] = True
    action = rng.integers(0, ACTIONS, size=(BATCH, ROWS)).astype(np.int32)
    action[:, -1] = ACTIONS  # the last row only bootstraps: its action must never be gathered
    data = {
        "obs": rng.normal(size=(BATCH, ROWS, OBS)).astype(np.float32),
        "action": action,
        "reward": rng.normal(size=(BATCH, ROWS)).astype(np.float32),
        "done": done,
        "truncated": truncated,
        "truncation_value": truncation_value,
        "core_state": rng.normal(size=(BATCH, 2, 4)).astype(np.float32),
        "env_id": np.arange(BATCH, dtype=np.int64),
    }
    return SampledSequences(
        indices=np.array([1, 0]),
        generations=np.array([1, 1]),
        weights=np.array(weights, np.float32),
        data=data,
    )


def r2d2_learner(cfg: R2D2Config, **kw):
    from seedq.agents.r2d2.learner import R2D2Learner

    return R2D2Learner(q_network(cfg), cfg, Placement(CPU, threading.Lock(), **kw))


def reference_td(learner, data: dict[str, np.ndarray], cfg: R2D2Config) -> torch.Tensor:
    """TD errors ``[L, B]`` from rows sliced by hand: burn-in from the stored state through
    each network, targets from the trained part, actions of rows burn_in .. R-2."""
    obs = torch.from_numpy(data["obs"]).transpose(0, 1)
    done = torch.from_numpy(data["done"]).T
    core = torch.from_numpy(data["core_state"])
    state = (core[:, 0], core[:, 1])
    with torch.no_grad():
        _, online_state = learner.model(obs[:BURN_IN], done[:BURN_IN], state)
        _, target_state = learner.target(obs[:BURN_IN], done[:BURN_IN], state)
        q_online = learner.model(obs[BURN_IN:], done[BURN_IN:], online_state)[0].q.double()
        q_target = learner.target(obs[BURN_IN:], done[BURN_IN:], target_state)[0].q.double()
    first = BURN_IN + 1
    rewards = data["reward"].T[first:] + cfg.gamma * (
        data["truncation_value"].T[first:] * data["truncated"].T[first:]
    )
    y = n_step_double_q_targets(
        q_online,
        q_target,
        torch.from_numpy(rewards).double(),
        torch.from_numpy(data["done"].T[first:]),
        gamma=cfg.gamma,
        n=cfg.n_step,
        eps=cfg.value_rescale_eps,
    )
    actions = torch.from_numpy(data["action"].T[BURN_IN:-1]).long()
    return y - q_online[:-1].gather(-1, actions[..., None])[..., 0]


def td_of(learner, data) -> np.ndarray:
    with torch.no_grad():
        return learner.td_errors(data)[0].numpy()


def test_r2d2_td_errors_are_the_reference_on_the_rows_sliced_by_the_convention():
    cfg = r2d2_config()
    learner, sample = r2d2_learner(cfg), r2d2_sample()
    np.testing.assert_allclose(
        td_of(learner, sample.data), reference_td(learner, sample.data, cfg), rtol=1e-5, atol=1e-6
    )


def test_r2d2_burn_in_starts_from_the_stored_state():
    cfg = r2d2_config()
    learner, sample = r2d2_learner(cfg), r2d2_sample()
    zeroed = {**sample.data, "core_state": np.zeros_like(sample.data["core_state"])}
    assert not np.allclose(td_of(learner, sample.data), td_of(learner, zeroed), atol=1e-4)


def test_r2d2_burn_in_runs_without_gradient_and_the_trained_part_with_it():
    cfg = r2d2_config()
    learner, sample = r2d2_learner(cfg), r2d2_sample()
    calls = []
    learner.model.register_forward_hook(
        lambda module, args, out: calls.append((args[0].shape[0], out[0].q.requires_grad))
    )
    learner.td_errors(sample.data)
    assert calls == [(BURN_IN, False), (LENGTH + 1, True)]


def test_r2d2_bootstrap_comes_from_the_target_network():
    cfg = r2d2_config()
    learner, sample = r2d2_learner(cfg), r2d2_sample()
    before = td_of(learner, sample.data)
    learner.target.load_state_dict(q_network(cfg, seed=1).state_dict())
    after = td_of(learner, sample.data)
    np.testing.assert_allclose(after, reference_td(learner, sample.data, cfg), rtol=1e-5, atol=1e-6)
    assert not np.allclose(before, after, atol=1e-4)


def test_r2d2_loss_weights_each_sequence_by_its_importance_weight():
    cfg = r2d2_config()
    learner, sample = r2d2_learner(cfg), r2d2_sample(weights=(1.0, 0.25))
    td = reference_td(learner, sample.data, cfg).numpy()
    learner.train_step(sample)
    expected = np.mean(np.array([1.0, 0.25]) * (0.5 * td**2).mean(0))
    assert learner.stats.pop_means()["loss/td"] == pytest.approx(expected, rel=1e-5)


def test_r2d2_sequence_with_zero_weight_gets_no_gradient():
    cfg = r2d2_config()
    sample = r2d2_sample(weights=(1.0, 0.0))
    other = copy.deepcopy(sample)
    other.data["reward"][1] += 10.0
    grads = []
    for s in (sample, other):
        learner = r2d2_learner(cfg)
        learner.train_step(s)
        grads.append(torch.cat([p.grad.flatten() for p in learner.model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


def test_r2d2_train_step_returns_the_priorities_of_its_td_errors():
    cfg = r2d2_config()
    learner, sample = r2d2_learner(cfg), r2d2_sample()
    td = reference_td(learner, sample.data, cfg)
    priorities = learner.train_step(sample)
    np.testing.assert_allclose(
        priorities, sequence_priorities(td, cfg.priority_eta).numpy(), rtol=1e-5
    )


def r2d2_normalising_learner():
    """An R2D2 learner whose network normalises its vector observations (obs_norm)."""
    from seedq.agents.r2d2.learner import R2D2Learner

    cfg = r2d2_config()
    cfg.model.obs_norm = True
    network = build_q_network((OBS,), ACTIONS, cfg.model, channels_last=False)
    return R2D2Learner(network, cfg, Placement(CPU, threading.Lock()))


def test_r2d2_merges_the_sampled_observations_into_its_statistics_after_an_update():
    """Before 2026-12-07 the statistics never moved: frames reached the network as pixels / 255
    whatever frame_norm said (pixel Catch stayed at random play, tests/test_pixel_learning.py)."""
    learner, sample = r2d2_normalising_learner(), r2d2_sample()
    (norm,) = obs_norms(learner.model)
    learner.train_step(sample)
    rows = sample.data["obs"].reshape(-1, OBS).astype(np.float64)
    assert int(norm.count) == BATCH * ROWS
    np.testing.assert_allclose(norm.mean.numpy(), rows.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), rows.var(0), rtol=1e-4)


def test_a_skipped_r2d2_update_leaves_the_observation_statistics_alone():
    learner, sample = r2d2_normalising_learner(), r2d2_sample()
    sample.data["obs"][0, BURN_IN + 1] = np.nan  # the loss is not finite: the update is skipped
    assert learner.train_step(sample) is None
    assert int(obs_norms(learner.model)[0].count) == 0


def test_r2d2_merges_the_frames_a_normaliser_keeps_of_a_large_batch_picked_on_the_host():
    """A batch of frames gives the statistics the normaliser's own thinning of its time-major
    rows gives, from the 64 frames picked before any upload."""
    from seedq.agents.r2d2.learner import R2D2Learner

    cfg = r2d2_config()
    shape = (1, 64, 64)  # 4,096 elements: a frame to the normaliser
    network = build_q_network(shape, ACTIONS, cfg.model, channels_last=False)
    reference = copy.deepcopy(network)
    learner = R2D2Learner(network, cfg, Placement(CPU, threading.Lock()))
    frames = np.random.default_rng(0).integers(0, 256, size=(5, 31, *shape), dtype=np.uint8)
    learner._merge_obs(frames)
    update_obs_norm(reference, np.ascontiguousarray(frames.swapaxes(0, 1)), threading.Lock())
    merged, expected = obs_norms(network)[0], obs_norms(reference)[0]
    assert (int(merged.count), int(expected.count)) == (52, 52)  # 155 rows, every third
    torch.testing.assert_close(merged.mean, expected.mean)
    torch.testing.assert_close(merged.var, expected.var)


def test_an_r2d2_checkpoint_trained_without_statistics_keeps_its_inputs_as_they_were(caplog):
    trained = r2d2_normalising_learner()
    trained.step.apply(trained.td_errors(r2d2_sample().data)[0].pow(2).mean())  # no merge
    state = {"model": trained.model.state_dict(), **trained.state_dict()}

    resumed = r2d2_normalising_learner()
    resumed.model.load_state_dict(state["model"])
    resumed.load_state_dict(state)
    resumed.train_step(r2d2_sample())

    assert (resumed.merges_obs, int(obs_norms(resumed.model)[0].count)) == (False, 0)
    assert "trained without observation statistics" in caplog.text

    # A checkpoint of a run that kept them goes on keeping them.
    fresh = r2d2_normalising_learner()
    fresh.model.load_state_dict(resumed.model.state_dict() | obs_norm_state(trained, 7))
    fresh.load_state_dict(state)
    assert fresh.merges_obs


def obs_norm_state(learner, count: int) -> dict[str, torch.Tensor]:
    """The model's normaliser buffers as a checkpoint holds them after ``count`` rows."""
    return {
        name: torch.full_like(value, count) if name.endswith("count") else value
        for name, value in learner.model.state_dict().items()
        if "obs_norm" in name
    }


def r2d2_agent(cfg: R2D2Config) -> R2D2Agent:
    run = SeedqConfig(
        env=FakeConfig(obs_shape=[OBS], num_actions=ACTIONS),
        actor=ActorConfig(num_actors=2),
    )
    run.algorithm = cfg
    spec = EnvSpec((OBS,), "float32", ACTIONS)
    return R2D2Agent(RunContext(run, spec, CPU, threading.Lock(), threading.Event()))


def test_r2d2_agent_writes_the_new_priorities_back_into_the_replay():
    cfg = r2d2_config(replay_capacity=4, replay_min_size=2, replay_ratio=1.0)
    agent = r2d2_agent(cfg)
    stored = r2d2_sample().data
    agent.replay.insert(stored, np.full(BATCH, 100.0), agent.ctx.stop.is_set)
    agent.replay.insert(stored, np.full(BATCH, 100.0), agent.ctx.stop.is_set)
    trained = []
    train_step = agent.learner.train_step

    def one_step(sample):
        priorities = train_step(sample)
        trained.append((sample.indices, priorities))
        agent.ctx.stop.set()
        return priorities

    agent.learner.train_step = one_step
    agent.train(lambda: 0)
    indices, priorities = trained[0]
    # The float32 priorities are raised to alpha in float64 by the replay, in float32 here.
    np.testing.assert_allclose(
        agent.replay.tree.get(indices),
        np.maximum(priorities, 1e-6) ** cfg.priority_exponent,
        rtol=1e-6,
    )


# --- autocast ------------------------------------------------------------------------------------


def linear_output_dtypes(model: torch.nn.Module) -> set[torch.dtype]:
    dtypes: set[torch.dtype] = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, args, out: dtypes.add(out.dtype))
    return dtypes


def test_vtrace_bf16_update_runs_its_forward_in_bf16_and_stays_finite():
    from seedq.agents.vtrace.network import build_network

    cfg = VTraceConfig()
    model = build_network((OBS,), ACTIONS, cfg.model, channels_last=False)
    before = copy.deepcopy(model.state_dict())
    dtypes = linear_output_dtypes(model)
    batch = vtrace_batch()
    batch.reward[0] = 0.0  # the poison of the exactness tests is not the point here
    batch.behaviour[-1] = 0.0
    stats = vtrace_learner(model, cfg, amp_dtype=torch.bfloat16).train_batch(batch)
    assert (dtypes, np.isfinite(stats["loss/total"])) == ({torch.bfloat16}, True)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_skipped_vtrace_update_leaves_the_observation_statistics_alone():
    from seedq.agents.vtrace.network import build_network

    cfg = VTraceConfig()
    model = build_network((OBS,), ACTIONS, cfg.model, channels_last=False)
    before = copy.deepcopy(model.state_dict())
    batch = vtrace_batch()
    batch.obs[1] = np.nan  # a NaN observation: the loss is not finite, the update is skipped

    stats = vtrace_learner(model, cfg).train_batch(batch)

    assert stats == {"skipped": True}
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # untouched


def test_r2d2_bf16_update_runs_its_forward_in_bf16_and_stays_finite():
    cfg = r2d2_config()
    learner = r2d2_learner(cfg, amp_dtype=torch.bfloat16)
    dtypes = linear_output_dtypes(learner.model)
    priorities = learner.train_step(r2d2_sample())
    assert (dtypes, bool(np.all(np.isfinite(priorities)))) == ({torch.bfloat16}, True)


@pytest.mark.parametrize("max_norm", [1e9, 0.5])
def test_clip_grad_norm_gives_the_bits_of_torchs_clip(max_norm):
    gen = torch.Generator().manual_seed(4)
    shapes = [(6, 512), (6,), (1, 512), (1,), (3, 3)]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    grads = [torch.randn(s, generator=gen) for s in shapes[:-1]]  # the last one gets none
    twins = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for p, q, g in zip(params, twins, grads, strict=False):
        p.grad, q.grad = g.clone(), g.clone()

    total = clip_grad_norm(params, max_norm)

    expected = torch.nn.utils.clip_grad_norm_(twins, max_norm)
    assert torch.equal(total, expected)
    for p, q in zip(params, twins, strict=True):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)


def test_loss_means_are_each_terms_mean_over_the_updates_and_hold_no_graph():
    weights = torch.ones(3, requires_grad=True)
    means = LossMeans()
    for scale in (1.0, 2.0, 6.0):
        total = (weights * scale).sum()
        means.add((total, total.detach() / 3))

    assert means.means() == [9.0, 3.0]
    assert len(means) == 3 and not any(t.requires_grad for t in means._terms)


def test_a_replay_agents_progress_line_says_training_starts_only_before_its_first_update():
    """The last line of an R2D2 run that ended between updates said "training starts at 500"
    after 6 updates (2026-12-07)."""
    agent = r2d2_agent(r2d2_config())
    row = {"loss/td": None, "replay/size": 1424, "train/updates": 0}
    assert agent.progress(row) == "replay 1424 (training starts at 200)"
    assert agent.progress(row | {"train/updates": 6}) == "replay 1424 | no update this interval"
