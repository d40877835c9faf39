"""The network body every algorithm shares: torsos and the optional LSTM core.

(Just over 400 lines on purpose: the five torsos and the recurrent body are one idea, the
part of every agent's network below its heads, and are read together.)

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

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from seedq.learner.normalize import RunningNorm

__all__ = [
    "CoreState",
    "RecurrentBody",
    "MLPTorso",
    "NatureTorso",
    "ImpalaTorso",
    "MinAtarTorso",
    "body_kwargs",
]

# The torso names configs may use (seedq.agents.config.TORSOS repeats them without torch; a
# test keeps the two equal).
TORSOS = ("auto", "mlp", "nature", "impala", "minatar")
# The MLP torso's nonlinearities (seedq.agents.config.ACTIVATIONS repeats them without torch).
ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}
# The Nature CNN's convs need frames of at least 36x36; torso=auto picks the minatar torso for
# smaller ones.
NATURE_MIN_SIZE = 36


# () for a feed-forward net; (h, c), each [B, lstm_size], for the LSTM core.
CoreState = tuple[Tensor, ...]


def orthogonal_(layer: nn.Linear | nn.Conv2d, gain: float) -> None:
    """Orthogonal weights and zero bias (the cleanrl/baselines init that trains CartPole well)."""
    nn.init.orthogonal_(layer.weight, gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


def _frames_to_float(x: Tensor) -> Tensor:
    """Pixel frames to floats: uint8 ``[0, 255]`` -> ``[0, 1]``; float frames pass unchanged.

    Frames travel as uint8 (4x smaller messages and buffers); scaling here keeps that true all
    the way to the first conv.
    """
    if x.dtype == torch.uint8:
        return x.float().div_(255.0)
    if not x.is_floating_point():
        return x.float()
    return x


class MLPTorso(nn.Module):
    """Linear layers, each followed by ``activation`` (``relu`` or ``tanh``), over flat vectors.

    Input ``[N, D]`` -> output ``[N, hidden_sizes[-1]]`` (``[N, D]`` when ``hidden_sizes`` is
    empty, i.e. the heads read the raw features).
    """

    def __init__(
        self, in_features: int, hidden_sizes: Sequence[int], activation: str = "relu"
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {activation!r}; expected one of {tuple(ACTIVATIONS)}"
            )
        layers: list[nn.Module] = []
        size = in_features
        for hidden in hidden_sizes:
            linear = nn.Linear(size, hidden)
            # sqrt(2) for both: the ReLU gain, and cleanrl's (baselines') choice for tanh MLPs.
            orthogonal_(linear, math.sqrt(2.0))
            layers += [linear, ACTIVATIONS[activation]()]
            size = hidden
        self.net = nn.Sequential(*layers)
        self.out_size = size

    def forward(self, x: Tensor) -> Tensor:
        """``[N, D]`` (any numeric dtype) -> ``[N, out_size]``."""
        if not x.is_floating_point():
            x = x.float()
        return self.net(x)


class _ConvTorso(nn.Module):
    """Shared plumbing of the image torsos: scaling, memory format, flatten and fc layer.

    Subclasses build ``self.convs`` (``[N, C, H, W] -> [N, C', H', W']``) and call
    :meth:`_finish` with the fc width.
    """

    convs: nn.Module
    fc: nn.Linear

    def __init__(self, obs_shape: tuple[int, ...], channels_last: bool) -> None:
        super().__init__()
        self.obs_shape = obs_shape
        self.channels_last = channels_last

    def _finish(self, fc_size: int, name: str, relu_before_fc: bool) -> None:
        # Size the fc layer from a dummy pass so any screen size (not only 84x84) works.
        with torch.no_grad():
            try:
                conv_out = self.convs(torch.zeros(1, *self.obs_shape))
            except RuntimeError as exc:
                raise ValueError(
                    f"observation shape {self.obs_shape} is too small for the {name!r} torso"
                ) from exc
        self.relu_before_fc = relu_before_fc
        self.fc = nn.Linear(conv_out[0].numel(), fc_size)
        self.out_size = fc_size
        if self.channels_last:
            # Only the 4-D conv weights change layout; Linear weights are untouched. Later
            # `.to(device)` and `load_state_dict` preserve the layout of the existing tensors.
            self.convs.to(memory_format=torch.channels_last)

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C, H, W]`` frames -> ``[N, out_size]`` features."""
        if self.channels_last:
            # Convert while still uint8 (1 byte/pixel) so the float copy is made in NHWC order.
            x = x.contiguous(memory_format=torch.channels_last)
        x = self.convs(_frames_to_float(x))
        # Flatten in logical (C, H, W) order whatever the memory layout, so fc weights mean the
        # same thing with and without channels_last and checkpoints are interchangeable.
        x = torch.flatten(x, 1)
        if self.relu_before_fc:
            x = torch.relu(x)
        return torch.relu(self.fc(x))


class NatureTorso(_ConvTorso):
    """DQN Nature CNN (Mnih et al., 2015): 32 8x8/4, 64 4x4/2, 64 3x3/1 convs, then fc 512.

    ``[N, C, H, W]`` -> ``[N, 512]``; for ``[4, 84, 84]`` the conv output is ``[64, 7, 7]``.
    """

    def __init__(self, obs_shape: tuple[int, ...], channels_last: bool = False) -> None:
        super().__init__(obs_shape, channels_last)
        in_channels = obs_shape[0]
        convs = [
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
        ]
        layers: list[nn.Module] = []
        for conv in convs:
            orthogonal_(conv, math.sqrt(2.0))
            layers += [conv, nn.ReLU()]
        self.convs = nn.Sequential(*layers)
        self._finish(512, "nature", relu_before_fc=False)
        orthogonal_(self.fc, math.sqrt(2.0))


class MinAtarTorso(_ConvTorso):
    """The MinAtar paper's network (Young & Tian, 2019): one 16-channel 3x3/1 conv, then fc 128.

    For small frames such as MinAtar's ``[C, 10, 10]`` (conv output ``[16, 8, 8]``), where the
    Nature CNN's 8x8/4 first conv leaves nothing for its later convs.
    """

    def __init__(self, obs_shape: tuple[int, ...], channels_last: bool = False) -> None:
        super().__init__(obs_shape, channels_last)
        conv = nn.Conv2d(obs_shape[0], 16, kernel_size=3, stride=1)
        orthogonal_(conv, math.sqrt(2.0))
        self.convs = nn.Sequential(conv, nn.ReLU())
        self._finish(128, "minatar", relu_before_fc=False)
        orthogonal_(self.fc, math.sqrt(2.0))


class _ResidualBlock(nn.Module):
    """Pre-activation residual block: ``x + conv(relu(conv(relu(x))))``, shape-preserving."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C, H, W]`` -> ``[N, C, H, W]``."""
        # Not in-place: `x` is needed again for the skip connection.
        out = self.conv0(torch.relu(x))
        out = self.conv1(torch.relu(out))
        return x + out


class _ImpalaStack(nn.Module):
    """conv 3x3 -> maxpool 3x3/2 (padding 1) -> 2 residual blocks; halves H and W (rounding up)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.res0 = _ResidualBlock(out_channels)
        self.res1 = _ResidualBlock(out_channels)

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C_in, H, W]`` -> ``[N, C_out, ceil(H/2), ceil(W/2)]``."""
        return self.res1(self.res0(self.pool(self.conv(x))))


class ImpalaTorso(_ConvTorso):
    """IMPALA "deep" ResNet (Espeholt et al., 2018, fig. 3): stacks of 16, 32, 32 channels.

    ``[N, C, H, W]`` -> ``[N, 256]``; for ``[4, 84, 84]`` the conv output is ``[32, 11, 11]``.
    Convs keep PyTorch's default init, as in torchbeast and cleanrl's IMPALA-CNN.
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        channels_last: bool = False,
        channels: Sequence[int] = (16, 32, 32),
    ) -> None:
        super().__init__(obs_shape, channels_last)
        stacks: list[nn.Module] = []
        in_channels = obs_shape[0]
        for out_channels in channels:
            stacks.append(_ImpalaStack(in_channels, out_channels))
            in_channels = out_channels
        self.convs = nn.Sequential(*stacks)
        # The last residual block ends in an addition, hence the ReLU before the fc layer.
        self._finish(256, "impala", relu_before_fc=True)


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
            the learner updates; see ``seedq.learner.normalize``); ignored for frames.
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
    ) -> None:
        super().__init__()
        obs_shape = tuple(int(d) for d in obs_shape)
        if torso not in TORSOS:
            raise ValueError(f"unknown torso {torso!r}; expected one of {TORSOS}")
        if len(obs_shape) not in (1, 3):
            raise ValueError(
                f"observation shape {obs_shape} is not supported: expected 1-D feature vectors "
                "(D,) for the 'mlp' torso or 3-D frames (C, H, W) for 'nature'/'impala'/'minatar'"
            )
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        if torso == "auto":
            if len(obs_shape) == 1:
                torso = "mlp"
            else:
                torso = "minatar" if min(obs_shape[1:]) < NATURE_MIN_SIZE else "nature"
        if torso == "mlp" and len(obs_shape) != 1:
            raise ValueError(
                f"torso 'mlp' needs 1-D observations (D,), got shape {obs_shape}; "
                "use torso 'nature', 'impala' or 'minatar' for (C, H, W) frames"
            )
        if torso in ("nature", "impala", "minatar") and len(obs_shape) != 3:
            raise ValueError(
                f"torso {torso!r} needs 3-D (C, H, W) frame observations, got shape "
                f"{obs_shape}; use torso 'mlp' for 1-D feature vectors"
            )

        self.obs_shape = obs_shape
        self.num_actions = num_actions
        self.torso_name = torso
        self.use_lstm = use_lstm
        self.lstm_size = lstm_size
        # Only meaningful for frames; vector nets have no 4-D tensors to reorder.
        self.channels_last = channels_last and torso != "mlp"

        # Frames are scaled to [0, 1] already; per-pixel statistics would cost more than help.
        self.obs_norm = RunningNorm(obs_shape) if obs_norm and len(obs_shape) == 1 else None
        self.torso: nn.Module
        if torso == "mlp":
            self.torso = MLPTorso(obs_shape[0], tuple(int(h) for h in hidden_sizes), activation)
        elif torso == "nature":
            self.torso = NatureTorso(obs_shape, channels_last=self.channels_last)
        elif torso == "minatar":
            self.torso = MinAtarTorso(obs_shape, channels_last=self.channels_last)
        else:
            self.torso = ImpalaTorso(obs_shape, channels_last=self.channels_last)
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
        # Checkpoints from before activation existed have no such key: their MLPs were ReLU.
        activation=str(getattr(model_cfg, "activation", "relu")),
        use_lstm=bool(model_cfg.use_lstm),
        lstm_size=int(model_cfg.lstm_size),
        channels_last=channels_last,
        # Checkpoints from before obs_norm existed have no such key: they never normalised.
        obs_norm=bool(getattr(model_cfg, "obs_norm", False)),
    )
