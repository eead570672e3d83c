"""Small bias-free MLPs shaped like tiny-cuda-nn's ``FullyFusedMLP`` (instant-ngp ``network``).

A config with ``n_hidden_layers = h`` has ``h + 1`` linear layers: input → width, (h − 1) ×
width → width, width → output; the activation follows each hidden layer and
``output_activation`` follows the last. No biases (tiny-cuda-nn's fully fused MLP has none);
weights are initialised Xavier-uniform as tiny-cuda-nn does (``GPUMatrix::initialize_xavier_uniform``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from trainer.contract.errors import ConfigError

__all__ = ["ACTIVATIONS", "MLP", "MLPConfig"]


class _Exponential(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)


class _Sine(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)


# tiny-cuda-nn activation names → modules (LeakyReLU slope 0.01 as in tiny-cuda-nn).
ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "None": nn.Identity,
    "ReLU": nn.ReLU,
    "LeakyReLU": lambda: nn.LeakyReLU(0.01),
    "Exponential": _Exponential,
    "Sine": _Sine,
    "Sigmoid": nn.Sigmoid,
    "Softplus": nn.Softplus,
    "Tanh": nn.Tanh,
}


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    """One MLP of the field (instant-ngp ``network`` / ``rgb_network`` block).

    Attributes:
        n_neurons: width of each hidden layer, >= 1.
        n_hidden_layers: number of hidden layers, >= 0.
        activation: hidden activation, one of :data:`ACTIVATIONS`.
        output_activation: activation after the last layer, one of :data:`ACTIVATIONS`.

    Raises:
        ConfigError: naming ``network.<field>`` and the bad value.
    """

    n_neurons: int = 64
    n_hidden_layers: int = 1
    activation: str = "ReLU"
    output_activation: str = "None"

    def __post_init__(self) -> None:
        for key, minimum in (("n_neurons", 1), ("n_hidden_layers", 0)):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ConfigError(f"network.{key}: expected an integer >= {minimum}, got {value!r}")
        for key in ("activation", "output_activation"):
            value = getattr(self, key)
            if value not in ACTIVATIONS:
                raise ConfigError(
                    f"network.{key}: expected one of {', '.join(ACTIVATIONS)}, got {value!r}"
                )


class MLP(nn.Module):
    """Bias-free MLP ``[n, n_input_dims] → [n, n_output_dims]`` built from an :class:`MLPConfig`.

    Runs in whatever dtype autocast picks (the output dtype follows).
    """

    def __init__(
        self,
        n_input_dims: int,
        n_output_dims: int,
        cfg: MLPConfig,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        widths = [n_input_dims] + [cfg.n_neurons] * cfg.n_hidden_layers + [n_output_dims]
        self.linears = nn.ModuleList(
            nn.Linear(w_in, w_out, bias=False, device=device)
            for w_in, w_out in zip(widths[:-1], widths[1:])
        )
        for linear in self.linears:
            nn.init.xavier_uniform_(linear.weight)
        self.activation = ACTIVATIONS[cfg.activation]()
        self.output_activation = ACTIVATIONS[cfg.output_activation]()

    def weights(self) -> list[nn.Parameter]:
        """The weight matrices, first layer first (the parameters L2 regularisation applies to)."""
        return [linear.weight for linear in self.linears]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.linears[:-1]:
            x = self.activation(linear(x))
        return self.output_activation(self.linears[-1](x))
