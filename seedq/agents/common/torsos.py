"""The torsos: the part of a network between observations and the core, one class a name.

Each is listed by name in :data:`seedq.agents.torsos.TORSOS` (the torch-free registry configs
validate against) and built through ``build(obs_shape, settings)``. A new torso is a class with
``build`` and ``out_size`` here or anywhere, plus one line in that registry. The layer init
every network of seedq uses (:func:`orthogonal_`) lives here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from seedq.agents.torsos import ACTIVATIONS, TorsoSettings
from seedq.schema import ConfigError


def orthogonal_(layer: nn.Linear | nn.Conv2d, gain: float) -> None:
    """Orthogonal weights and zero bias (the cleanrl/baselines init that trains CartPole well)."""
    nn.init.orthogonal_(layer.weight, gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


def _frames_to_float(x: Tensor) -> Tensor:
    """Pixel frames to float32: uint8 ``[0, 255]`` -> ``[0, 1]``; other dtypes cast.

    Frames travel as uint8 (4x smaller messages and buffers); scaling here keeps that true all
    the way to the first conv.
    """
    if x.dtype == torch.uint8:
        return x.float().div_(255.0)
    return _to_float32(x)


def _to_float32(x: Tensor) -> Tensor:
    # The weights are float32: a float16 or float64 input fails in the first layer ("mat1 and
    # mat2 must have the same dtype"); autocast, where it is on, casts from float32 itself.
    return x if x.dtype == torch.float32 else x.float()


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
        nonlinearity = getattr(nn, ACTIVATIONS[activation])
        layers: list[nn.Module] = []
        size = in_features
        for hidden in hidden_sizes:
            linear = nn.Linear(size, hidden)
            # sqrt(2) for both: the ReLU gain, and cleanrl's (baselines') choice for tanh MLPs.
            orthogonal_(linear, math.sqrt(2.0))
            layers += [linear, nonlinearity()]
            size = hidden
        self.net = nn.Sequential(*layers)
        self.out_size = size

    @classmethod
    def build(cls, obs_shape: tuple[int, ...], settings: TorsoSettings) -> MLPTorso:
        return cls(obs_shape[0], settings.hidden_sizes, settings.activation)

    def forward(self, x: Tensor) -> Tensor:
        """``[N, D]`` (any numeric dtype) -> ``[N, out_size]``, float32."""
        return self.net(_to_float32(x))


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

    @classmethod
    def build(cls, obs_shape: tuple[int, ...], settings: TorsoSettings) -> _ConvTorso:
        return cls(obs_shape, channels_last=settings.channels_last)

    def _finish(self, fc_size: int, name: str, relu_before_fc: bool) -> None:
        # Size the fc layer from a dummy pass so any screen size (not only 84x84) works.
        with torch.no_grad():
            try:
                conv_out = self.convs(torch.zeros(1, *self.obs_shape))
            except RuntimeError as exc:
                # A ConfigError: seedq-train refuses the run with this one line.
                raise ConfigError(
                    f"observation shape {self.obs_shape} is too small for the {name!r} torso; "
                    "choose another with algorithm.model.torso=..., or have the env deliver "
                    "larger frames"
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
