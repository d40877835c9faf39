"""The V-trace update on a batch of unrolls ``[T+1, B]``."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch

from seedq.agents.common.graphs import GraphedUpdate, Prepared
from seedq.agents.common.indicators import param_groups
from seedq.agents.common.normalize import update_obs_norm
from seedq.agents.common.onpolicy import LossMeans, OnPolicyLearner
from seedq.agents.common.update import GradientStep, Placement, clip_grad_norm, make_adam
from seedq.agents.vtrace.config import VTraceConfig
from seedq.agents.vtrace.loss import (
    VTraceLoss,
    VTraceReturns,
    action_log_probs,
    actor_critic_loss,
    vtrace_loss,
    vtrace_returns,
)
from seedq.core.unroll import TIME_FIELDS, Unroll, take_columns
from seedq.messages import EnvSpec

log = logging.getLogger(__name__)
# hardware.cuda_graphs' choices for the learner: eager updates, recorded ones (cuda: asked for,
# so what cannot be recorded is warned about; auto: recorded where they apply, said at info
# level), or (tests) the recorded path's plumbing run eagerly on any device.
GRAPH_MODES = ("none", "cuda", "auto", "emulate")


class BatchTargets(NamedTuple):
    """A batch's V-trace targets under one set of weights, flattened to transitions ``[T * B]``."""

    actions: torch.Tensor
    behaviour: torch.Tensor  # the actors' log-probs of the actions
    vs: torch.Tensor
    advantages: torch.Tensor  # the policy gradient's
    policy: torch.Tensor  # log-probs of the actions under those weights


def make_optimizer(
    model: torch.nn.Module, cfg: VTraceConfig, spec: EnvSpec | None = None
) -> torch.optim.Optimizer:
    """Adam or RMSprop over ``model``; with ``spec``, weights reading indicator observations
    get their learning rate (``algorithm.indicator_lr_scale``)."""
    groups = param_groups(model, spec, cfg.lr, cfg.indicator_lr_scale)
    if cfg.optimizer == "adam":
        return make_adam(groups, lr=cfg.lr, eps=cfg.adam_eps)
    return torch.optim.RMSprop(
        groups,
        lr=cfg.lr,
        alpha=cfg.rmsprop_alpha,
        eps=cfg.rmsprop_eps,
        momentum=cfg.rmsprop_momentum,
    )


class VTraceLearner(OnPolicyLearner):
    """One V-trace update per batch; owns the optimizer and the reward scaler.

    ``graphs``: ``cuda`` replays each minibatch update of the feed-forward path from a CUDA
    graph (``hardware.cuda_graphs``, :mod:`seedq.agents.common.graphs`), and ``auto`` likewise
    with what cannot be recorded said at info level, not as a warning; ``emulate`` runs that
    path's plumbing eagerly (tests); ``none``: eager updates."""

    def __init__(
        self,
        model: torch.nn.Module,
        cfg: VTraceConfig,
        placement: Placement,
        *,
        total_env_steps: int,
        spec: EnvSpec | None = None,
        seed: int = 0,
        graphs: str = "none",
    ) -> None:
        optimizer = make_optimizer(model, cfg, spec)
        step = GradientStep(model.parameters(), optimizer, placement, grad_clip=cfg.grad_clip)
        super().__init__(model, cfg, step, total_env_steps=total_env_steps)
        self._rng = np.random.default_rng(seed)
        if graphs not in GRAPH_MODES:
            raise ValueError(f"graphs={graphs!r}; expected one of {GRAPH_MODES}")
        self.graphed: GraphedUpdate | None = None
        self._graph_log = log.info if graphs == "auto" else log.warning
        if graphs != "none":
            if step.collective is not None or step.scaler.is_enabled():
                raise ValueError(
                    "CUDA graphs record one rank's update without a grad scaler: not with "
                    "several learner ranks or fp16"
                )
            self.graphed = GraphedUpdate(step, self._graph_update, emulate=graphs == "emulate")
            self._record_graphs(spec)
        self._eager_noted = False

    def _record_graphs(self, spec: EnvSpec | None) -> None:
        """Record the minibatch updates of the feed-forward path for the shapes its batches of
        ``batch_size`` unrolls will be cut into, before the run goes live (GraphedUpdate)."""
        cfg = self.cfg
        columns = int(cfg.batch_size)
        recurrent = getattr(self.model, "core", None) is not None
        if (
            spec is None
            or columns <= 0
            or cfg.minibatches <= 1
            or not cfg.shuffle_transitions
            or recurrent
        ):
            self._graph_log(
                "hardware.cuda_graphs: nothing recorded (it records minibatches of shuffled "
                "transitions of a feed-forward model: algorithm.batch_size > 0, minibatches > 1, "
                "shuffle_transitions; here batch_size=%s, minibatches=%s, shuffle_transitions=%s, "
                "%s model): the updates run eagerly",
                cfg.batch_size,
                cfg.minibatches,
                cfg.shuffle_transitions,
                "a recurrent" if recurrent else "a feed-forward",
            )
            return
        device = self.step.device
        transitions = int(cfg.unroll_length) * columns
        sizes = {len(c) for c in torch.arange(transitions).chunk(cfg.minibatches)}
        obs_dtype = torch.from_numpy(np.zeros(0, spec.obs_dtype)).dtype
        for n in sorted(sizes):
            self.graphed.record(
                torch.zeros((1, n, *spec.obs_shape), dtype=obs_dtype, device=device),
                torch.zeros(n, dtype=torch.long, device=device),
                torch.zeros(n, device=device),
                torch.zeros(n, device=device),
                torch.zeros(n, device=device),
            )

    def loss(self, batch: Unroll, transitions: tuple[torch.Tensor, torch.Tensor] | None = None):  # noqa: ANN201 - a VTraceLoss
        """The IMPALA loss of ``batch`` under the current weights.

        Row t of ``batch`` holds obs t and the behaviour logits and action taken at it; the
        last row only bootstraps (its value), so the loss sees rows ``[:-1]`` of everything
        per-step and the transitions' rewards/discounts come from rows ``[1:]``.
        ``transitions``: those rewards and discounts ``[T, B]`` when already computed (the
        reward scaler must see each batch once, whatever the number of passes over it).
        """
        cfg, tensor = self.cfg, self.step.tensor
        obs, done = tensor(batch.obs), tensor(batch.done)
        state = tuple(tensor(s) for s in batch.core_state)
        with self.step.autocast():
            out, _ = self.model(obs, done, state)
        logits, values = out.logits.float(), out.baseline.float()
        rewards, discounts = transitions or self.transitions(batch, done)
        return vtrace_loss(
            target_logits=logits[:-1],
            behaviour_logits=tensor(batch.behaviour)[:-1],
            actions=tensor(batch.action).long()[:-1],
            values=values[:-1],
            bootstrap_value=values[-1],
            rewards=rewards,
            discounts=discounts,
            baseline_cost=cfg.baseline_cost,
            entropy_cost=cfg.entropy_cost,
            clip_rho_threshold=cfg.clip_rho_threshold,
            clip_pg_rho_threshold=cfg.clip_pg_rho_threshold,
            lambda_=cfg.lambda_,
            pg_bootstrap=cfg.pg_bootstrap,
            clip_eps=cfg.clip_eps,
            normalize_advantages=cfg.normalize_advantages,
            value_scale=self.value_scale(),
        )

    def _column_sets(self, columns: int) -> list[np.ndarray]:
        """The env columns of each minibatch of one pass: all of them in order for a single
        minibatch, else a fresh random split."""
        if self.cfg.minibatches == 1:
            return [np.arange(columns)]
        return np.array_split(self._rng.permutation(columns), self.cfg.minibatches)

    def _column_losses(
        self, batch: Unroll, transitions: tuple[torch.Tensor, torch.Tensor]
    ) -> Iterator[VTraceLoss]:
        """One pass of updates, each on a share of the env columns with its own V-trace
        targets (the recurrent path: a recurrent core needs whole columns)."""
        for cols in self._column_sets(batch.num_columns):
            index = torch.as_tensor(cols, device=transitions[0].device)
            part = batch if len(cols) == batch.num_columns else take_columns(batch, index)
            yield self.loss(part, (transitions[0][:, index], transitions[1][:, index]))

    def _batch_targets(
        self, batch: Unroll, transitions: tuple[torch.Tensor, torch.Tensor]
    ) -> BatchTargets:
        """V-trace targets of the whole batch under the current weights. ``batch`` is on the
        device already (``device_unroll``)."""
        cfg = self.cfg
        with torch.no_grad(), self.step.autocast():
            out, _ = self.model(batch.obs, batch.done, tuple(batch.core_state))
        logits, values = out.logits.float(), out.baseline.float()
        actions = batch.action.long()[:-1]
        behaviour = action_log_probs(batch.behaviour[:-1].float(), actions)
        policy = action_log_probs(logits[:-1], actions)
        returns = vtrace_returns(
            policy - behaviour,
            transitions[1],
            transitions[0],
            values[:-1],
            values[-1],
            clip_rho_threshold=cfg.clip_rho_threshold,
            clip_pg_rho_threshold=cfg.clip_pg_rho_threshold,
            lambda_=cfg.lambda_,
            pg_bootstrap=cfg.pg_bootstrap,
        )
        return BatchTargets(
            actions.reshape(-1),
            behaviour.reshape(-1),
            returns.vs.reshape(-1),
            returns.pg_advantages.reshape(-1),
            policy.reshape(-1),
        )

    def _transition_losses(
        self,
        batch: Unroll,
        transitions: tuple[torch.Tensor, torch.Tensor],
        targets: BatchTargets | None = None,
        proximal: torch.Tensor | None = None,
    ) -> Iterator[VTraceLoss]:
        """One pass of updates of a feed-forward model, each on a random share of the batch's
        transitions, against ``targets`` (``_batch_targets``), or when None the targets of
        the whole batch under the current weights. ``proximal``: the log-probs ``[T * B]`` the
        clipped surrogate's ratio is taken against (``algorithm.proximal_policy``); None: the
        behaviour policy's."""
        cfg = self.cfg
        targets = targets or self._batch_targets(batch, transitions)
        actions, vs, advantages = targets.actions, targets.vs, targets.advantages
        anchor = targets.behaviour if proximal is None else proximal
        value_scale = self.value_scale()
        obs = batch.obs
        flat = obs[:-1].reshape(-1, *obs.shape[2:])
        order = torch.as_tensor(self._rng.permutation(len(actions)), device=flat.device)
        for index in order.chunk(cfg.minibatches):
            # index_select copies whole rows; advanced indexing (flat[index]) goes element by
            # element: 18x slower on a CPU for a minibatch of Atari frames (4.7 vs 0.26 ms).
            rows = flat.index_select(0, index)[None]
            inputs = (rows, actions[index], anchor[index], vs[index], advantages[index])
            if self.graphed is not None:
                yield self.graphed(*inputs)
            else:
                yield self._minibatch_loss(*inputs, value_scale=value_scale)

    def _minibatch_loss(
        self,
        rows: torch.Tensor,
        actions: torch.Tensor,
        anchor: torch.Tensor,
        vs: torch.Tensor,
        advantages: torch.Tensor,
        *,
        value_scale: torch.Tensor | None,
        cache: bool = True,
    ) -> VTraceLoss:
        """The loss of a minibatch of transitions ``rows [1, N, *obs]`` against their targets
        (``cache``: autocast's weight casts cached, as everywhere but in a CUDA graph)."""
        cfg = self.cfg
        with self.step.autocast(cache=cache):
            out, _ = self.model(
                rows, torch.zeros(rows.shape[:2], dtype=torch.bool, device=rows.device), ()
            )
        return actor_critic_loss(
            out.logits[0].float(),
            actions,
            anchor,
            out.baseline[0].float(),
            VTraceReturns(vs=vs, pg_advantages=advantages),
            baseline_cost=cfg.baseline_cost,
            entropy_cost=cfg.entropy_cost,
            clip_eps=cfg.clip_eps,
            normalize_advantages=cfg.normalize_advantages,
            value_scale=value_scale,
        )

    def _graph_update(self, *inputs: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """What a CUDA graph records: a minibatch's loss, its backward and the clip. The
        PopArt scale is read from its moments inside, so each replay takes the current ones."""
        loss = self._minibatch_loss(*inputs, value_scale=self.value_scale(), cache=False)
        loss.total.backward()
        return tuple(loss), clip_grad_norm(self.step.parameters, self.step.grad_clip)

    def train_batch(self, batch: Unroll) -> dict[str, Any]:
        """``epochs x minibatches`` updates (one by default); the stats are their means, with
        ``skipped=True`` when none was finite."""
        # The batch goes to the device once; each minibatch gathers its rows there.
        on_device = device_unroll(batch, self.step.tensor)
        transitions = self.transitions(batch, on_device.done)
        # One minibatch trains on the same rows either way; fixed_targets and a proximal policy
        # at the batch's start need this path's targets computed apart from the updates (the
        # config refuses them with an LSTM).
        fixed = self.cfg.fixed_targets
        batch_start = self.cfg.proximal_policy == "batch_start"
        by_transition = (
            self.cfg.shuffle_transitions
            and (self.cfg.minibatches > 1 or fixed or batch_start)
            and not batch.core_state
        )
        passes = self._transition_losses if by_transition else self._column_losses
        if self.graphed is not None and not by_transition and not self._eager_noted:
            self._eager_noted = True
            self._graph_log(
                "hardware.cuda_graphs: this run's V-trace updates train on whole env columns "
                "(a recurrent core, or shuffle_transitions off or one minibatch): they run "
                "eagerly; only minibatches of shuffled transitions are recorded"
            )
        first_targets = None
        if self.popart is not None or (by_transition and (fixed or batch_start)):
            first_targets = self._batch_targets(on_device, transitions)
        if self.popart is not None and not self.update_value_norm(first_targets.vs):
            # Before the updates, so they regress on targets standardised with this batch in
            # the moments. The head keeps its outputs, so the targets stay valid, except after
            # the first targets, which moved an untrained head's values: computed again.
            first_targets = self._batch_targets(on_device, transitions)
        # The policy before the batch's first update: with batch_start every update's clip is
        # taken against it, so the batch moves the policy as far as one of PPO's (data acted a
        # few batches back would otherwise clip against weights the learner has left).
        proximal = first_targets.policy if by_transition and batch_start else None
        if by_transition:
            # fixed: computed before the first update, so every pass trains on the advantages
            # under the weights that start the batch, as PPO trains on its GAE: recomputed at a
            # later pass, they come from a value head already fitted to these transitions.
            passes = functools.partial(
                self._transition_losses, targets=first_targets if fixed else None, proximal=proximal
            )

        terms = LossMeans()
        for epoch in range(self.cfg.epochs):
            if self.stopping():
                break
            pass_losses = passes(on_device, transitions)
            if epoch == 0 and by_transition and first_targets is not None:
                # The first pass reuses the targets just computed (the same weights).
                pass_losses = self._transition_losses(
                    on_device, transitions, first_targets, proximal
                )
            for loss in pass_losses:
                if self.stopping():
                    break
                # A non-finite update is skipped on the device; the batch's norms are read
                # once, after its last update (LossMeans.settle).
                if isinstance(loss, Prepared):
                    grad_norm = self.step.step_prepared_deferred(
                        loss.terms[0], loss.grad_norm, loss.grads
                    )
                    loss = loss.terms  # noqa: PLW2901 - the terms, as an eager loss gives them
                else:
                    grad_norm = self.step.apply_deferred(loss.total)
                terms.add(loss, grad_norm)
        grad_norms = terms.settle(self.stats)
        if not terms:
            # A skipped update leaves the observation statistics alone too: a NaN observation
            # must not poison them, and a run of skips keeps the last good model whole.
            return {"skipped": True}
        # After the updates: this batch was trained with the statistics it was collected with.
        update_obs_norm(self.model, on_device.obs[1:], self.step.weights_lock, self.step.collective)
        stats = dict(zip(LOSS_KEYS, terms.means(), strict=True))
        stats["grad_norm"] = sum(grad_norms) / len(grad_norms)
        stats["lr"] = self.optimizer.param_groups[0]["lr"]
        self.stats.samples += int(batch.action.shape[1]) * (int(batch.action.shape[0]) - 1)
        self.stats.add(stats)
        return stats


# In VTraceLoss's order.
LOSS_KEYS = (
    "loss/total",
    "loss/pg",
    "loss/baseline",
    "loss/entropy",
    "loss/approx_kl",
    "loss/clip_fraction",
)


def device_unroll(batch: Unroll, tensor: Callable[[np.ndarray], torch.Tensor]) -> Unroll:
    """``batch`` with every field passed through ``tensor`` (host arrays to the device)."""
    return Unroll(
        **{name: tensor(getattr(batch, name)) for name in TIME_FIELDS},
        core_state=tuple(tensor(s) for s in batch.core_state),
        env_id=tensor(batch.env_id),
    )
