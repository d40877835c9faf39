"""The network body every algorithm shares: a torso (chosen by name from
``seedq.agents.torsos``) and the optional LSTM core.

One module serves both callers of a SEED-style learner: inference runs ``T = 1`` steps for a batch
of envs with a carried recurrent state, and training runs ``T = unroll_length + 1`` steps from the
state stored at the start of each unroll. Both go through the same ``forward`` of the agent's
network (its heads live with the agent, ``seedq.agents.<name>.network``), so the policy that
acted and the policy that is trained compute identical functions.

Shape conventions (``T`` time, ``B`` batch, ``A`` actions):

* ``obs``: ``[T, B, *obs_shape]``; float32 feature vectors, or frames ``[C, H, W]`` (uint8 pixel
  values are scaled to ``[0, 1]`` inside the model so that the wire format stays one byte/pixel).
* ``done``: bool ``[T, B]``; ``done[t]`` means ``obs[t]`` starts a new episode, so the recurrent
  state is zeroed before step ``t`` is processed (the SEED RL convention).
* Output: the agent's heads on top of :meth:`RecurrentBody.embed`'s features.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from seedq.agents.common.normalize import RunningNorm
from seedq.agents.config import NORM_CLIP, model_activation, model_norm_clip
from seedq.agents.torsos import TORSOS, TorsoSettings, auto_torso, torso_class
from seedq.schema import ConfigError

__all__ = ["CoreState", "RecurrentBody", "body_kwargs"]


# () for a feed-forward net; (h, c), each [B, lstm_size], for the LSTM core.
CoreState = tuple[Tensor, ...]


class RecurrentBody(nn.Module):
    """Torso -> optional LSTM core; the heads are added by the subclasses.

    Args:
        obs_shape: shape of one observation: ``(D,)`` vectors or ``(C, H, W)`` frames.
        num_actions: size ``A`` of the discrete action space.
        torso: ``"auto"`` (``mlp`` for 1-D obs, ``nature`` for 3-D obs, ``minatar`` for frames
            smaller than 36x36), ``"mlp"``, ``"nature"``, ``"impala"`` or ``"minatar"``.
        hidden_sizes: MLP layer widths (ignored by the conv torsos).
        activation: the MLP's nonlinearity, ``"relu"`` or ``"tanh"`` (ignored by the conv
            torsos).
        use_lstm: add an LSTM core between torso and heads.
        lstm_size: LSTM hidden/cell size.
        channels_last: for image torsos, run the convs in ``torch.channels_last`` memory format
            (1.5-2x faster on CPU); numerically equivalent to the default NCHW layout.
        obs_norm: normalise 1-D observations by running statistics (a :class:`RunningNorm`
            the learner updates; see ``seedq.agents.common.normalize``); ignored for frames.
        frame_norm: the same for frames ``[C, H, W]``, per pixel; ignored for vectors.
        norm_clip: either normaliser's clip, in running standard deviations.
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int,
        *,
        torso: str = "auto",
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "relu",
        use_lstm: bool = False,
        lstm_size: int = 256,
        channels_last: bool = True,
        obs_norm: bool = False,
        frame_norm: bool = False,
        norm_clip: float = NORM_CLIP,
    ) -> None:
        super().__init__()
        obs_shape = tuple(int(d) for d in obs_shape)
        if torso != "auto" and torso not in TORSOS:
            raise ConfigError(
                f"algorithm.model.torso={torso} is unknown; expected auto or one of {list(TORSOS)}"
            )
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        torso = auto_torso(obs_shape) if torso == "auto" else torso
        entry = TORSOS[torso]
        if len(obs_shape) != entry.obs_rank:
            fitting = [name for name, e in TORSOS.items() if e.obs_rank == len(obs_shape)]
            # A ConfigError: seedq-train refuses the run with this one line, not a traceback.
            raise ConfigError(
                f"algorithm.model.torso={torso} needs {entry.input}, got observations of shape "
                f"{obs_shape}; "
                + (
                    f"use algorithm.model.torso={' or '.join(['auto', *fitting])}"
                    if fitting
                    else "no torso fits"
                )
            )

        self.obs_shape = obs_shape
        self.num_actions = num_actions
        self.torso_name = torso
        self.use_lstm = use_lstm
        self.lstm_size = lstm_size
        # Only meaningful for frames; vector nets have no 4-D tensors to reorder.
        self.channels_last = channels_last and entry.obs_rank == 3

        frames = len(obs_shape) == 3
        self.obs_norm = None
        if frame_norm and frames:
            # Statistics in pixel units; before the first update it divides by 255, as the
            # conv torsos would.
            self.obs_norm = RunningNorm(obs_shape, clip=norm_clip, initial_std=255.0)
        elif obs_norm and not frames:
            self.obs_norm = RunningNorm(obs_shape, clip=norm_clip)
        settings = TorsoSettings(
            tuple(int(h) for h in hidden_sizes), activation, self.channels_last
        )
        self.torso: nn.Module = torso_class(torso).build(obs_shape, settings)
        core_in: int = self.torso.out_size

        self.core: nn.LSTMCell | None = None
        if use_lstm:
            self.core = nn.LSTMCell(core_in, lstm_size)
            for name, param in self.core.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(param, 1.0)
                else:
                    nn.init.zeros_(param)
            self.core_out = lstm_size
        else:
            self.core_out = core_in

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> CoreState:
        """Zero core state: ``()`` without LSTM, else ``(h, c)``, each ``[batch_size, lstm_size]``.

        Defaults to the device and dtype of the model parameters.
        """
        if self.core is None:
            return ()
        weight = self.core.weight_hh
        device = weight.device if device is None else device
        shape = (batch_size, self.lstm_size)
        return (
            torch.zeros(shape, device=device, dtype=weight.dtype),
            torch.zeros(shape, device=device, dtype=weight.dtype),
        )

    def embed(self, obs: Tensor, done: Tensor, core_state: CoreState) -> tuple[Tensor, CoreState]:
        """Run ``T`` steps for ``B`` envs through torso and core.

        Args:
            obs: ``[T, B, *obs_shape]``.
            done: bool ``[T, B]``; ``done[t]`` zeroes the core state before step ``t``.
            core_state: state before step 0 (see :meth:`initial_state`).

        Returns:
            ``(features [T * B, core_out], core_state after step T-1)``.
        """
        if obs.dim() < 2 or tuple(obs.shape[2:]) != self.obs_shape:
            raise ValueError(
                f"obs must have shape [T, B, *{self.obs_shape}], got {tuple(obs.shape)}"
            )
        T, B = obs.shape[0], obs.shape[1]
        flat = obs.reshape(T * B, *self.obs_shape)
        if self.obs_norm is not None:
            flat = self.obs_norm(flat)
        # One batched torso pass over all T*B observations: the expensive part never loops.
        features = self.torso(flat)

        if self.core is None:
            core_out = features
            new_state: CoreState = ()
        else:
            if done.shape != (T, B):
                raise ValueError(f"done must have shape [{T}, {B}], got {tuple(done.shape)}")
            if len(core_state) != 2:
                raise ValueError(
                    f"LSTM core_state must be (h, c), got a tuple of {len(core_state)}"
                )
            core_out, new_state = self._unroll_core(features.reshape(T, B, -1), done, core_state)
            core_out = core_out.reshape(T * B, -1)
        return core_out, new_state

    def _unroll_core(
        self, features: Tensor, done: Tensor, core_state: CoreState
    ) -> tuple[Tensor, CoreState]:
        """Step the LSTM over time with episode resets.

        ``features [T, B, F]``, ``done [T, B]``, ``core_state (h, c)`` each ``[B, H]`` ->
        (``[T, B, H]`` outputs, final ``(h, c)``).
        """
        assert self.core is not None
        h, c = core_state
        # [T, B, 1] so the mask broadcasts over the state width.
        reset = done.to(torch.bool).unsqueeze(-1)
        zero = torch.zeros((), device=h.device, dtype=h.dtype)
        outputs: list[Tensor] = []
        for t in range(features.shape[0]):
            # torch.where (not multiplying by 1 - done) so a non-finite old state cannot leak
            # into a new episode, and no host sync is needed to ask whether any env reset.
            h = torch.where(reset[t], zero, h)
            c = torch.where(reset[t], zero, c)
            h, c = self.core(features[t], (h, c))
            outputs.append(h)
        return torch.stack(outputs), (h, c)


def body_kwargs(model_cfg: Any, channels_last: bool) -> dict[str, Any]:
    """:class:`RecurrentBody` arguments from a ``ModelConfig``-like object (dataclass or
    OmegaConf node): the part of every algorithm's network that is not its head."""
    return dict(
        torso=str(model_cfg.torso),
        hidden_sizes=tuple(int(h) for h in model_cfg.hidden_sizes),
        activation=model_activation(model_cfg),
        use_lstm=bool(model_cfg.use_lstm),
        lstm_size=int(model_cfg.lstm_size),
        channels_last=channels_last,
        # Checkpoints from before obs_norm existed have no such key: they never normalised.
        obs_norm=bool(getattr(model_cfg, "obs_norm", False)),
        # Checkpoints from before frame_norm existed fed frames to the torso as pixels / 255.
        frame_norm=bool(getattr(model_cfg, "frame_norm", False)),
        norm_clip=model_norm_clip(model_cfg),
    )
