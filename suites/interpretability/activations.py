"""Per-unit activations on token windows, through the public mixer interfaces only.

How a unit's activation at a token is defined, per what the mixer exposes:

* ``write-gate`` (ProtoT, or any mixer that records ``write_gate``): the write-gate weight pi[t, k] the token gives
  prototype k (recorded with :class:`harness.Recorder`), as the paper profiles prototypes; the read gate is kept for
  the read-versus-write lag;
* ``contribution`` (attention heads, Mamba channels and heads, DeltaNet heads: mixers whose ``intervene`` supports
  ``"mask"``): the L2 norm of what the unit adds to the mixer's output at the token, ||y_t - y_t(unit masked)||, i.e.
  what that head or channel writes into the residual stream there. Every built-in "mask" zeroes the unit's block of
  the input of a linear output projection, so y - y(masked) = W_out[:, block] h[block] exactly and one forward per
  layer gives every unit (:func:`projected_contributions`; tested against the masked re-runs). A mixer whose
  output projection is not known is re-run on its captured input once per unit (:func:`contributions`). Mixers
  with many units (Mamba-1's 2*d channels) are profiled on an evenly spaced subset;
* anything else: skipped, with the reason in the result.

Mixer inputs are captured with forward pre-hooks on ``model.blocks[i].mixer`` during ``model.hidden_states`` (no
LM head is computed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from harness.errors import ConfigError
from harness.mixer import Unit
from harness.recording import Recorder

BATCH_WINDOWS = 32


@dataclass
class UnitSet:
    """Activations of one set of units on the same windows: what profiles and scores read."""

    name: str  # "units", "null", "sae_var", "sae_freq"
    kind: str  # "prototype", "head", "channel", "SAE feature"
    definition: str  # "write-gate", "contribution", "sae"
    units: list[Unit]
    acts: torch.Tensor  # [n_windows, T, n_units] float32


@dataclass
class Gates:
    """ProtoT's recorded gates per layer: [n_windows, T, R] each (``shared``: the read gate is the write gate)."""

    write: dict[int, torch.Tensor]
    read: dict[int, torch.Tensor]


@torch.no_grad()
def capture(model, ids: torch.Tensor, gates: bool) -> tuple[list[torch.Tensor], Gates | None]:
    """Each mixer's input on ``ids [n, T]`` (list over layers of [n, T, d]) and, with ``gates``, the recorded gates
    (None when the mixer records none)."""
    model.eval()
    inputs: list[list[torch.Tensor]] = [[] for _ in model.blocks]
    hooks = [
        block.mixer.register_forward_pre_hook(lambda mod, args, i=i: inputs[i].append(args[0].detach()))
        for i, block in enumerate(model.blocks)
    ]
    try:
        with Recorder({"write_gate", "read_gate"} if gates else set()) as rec:
            for s in range(0, len(ids), BATCH_WINDOWS):
                model.hidden_states(ids[s : s + BATCH_WINDOWS])
    finally:
        for h in hooks:
            h.remove()
    xs = [torch.cat(parts) for parts in inputs]
    if not gates or not any(name == "write_gate" for _, name in rec.records):
        return xs, None
    write = {layer: _batches(rec.records[(layer, "write_gate")]) for layer, name in rec.records if name == "write_gate"}
    read = {layer: _batches(rec.records[(layer, "read_gate")]) for layer, name in rec.records if name == "read_gate"}
    return xs, Gates(write, read)


def _batches(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(parts, dim=0)  # one recording per forward batch: concatenate along windows


def profiled_units(model, max_per_layer: int) -> list[list[Unit]]:
    """The units of each layer, an evenly spaced subset where a layer exposes more than ``max_per_layer``."""
    out = []
    for block in model.blocks:
        units = block.mixer.units()
        if len(units) > max_per_layer:
            units = [units[i] for i in np.linspace(0, len(units) - 1, max_per_layer).round().astype(int)]
        out.append(units)
    return out


def unit_activations(model, ids: torch.Tensor, name: str, max_per_layer: int) -> tuple[UnitSet | None, Gates | None, str]:
    """The model's own units on ``ids``; returns (unit set or None, gates or None, why-skipped or "")."""
    layers = profiled_units(model, max_per_layer)
    if not any(layers):
        return None, None, f"mixer '{model.spec.mixer}' exposes no units"
    xs, gates = capture(model, ids, gates=True)
    units = [u for layer in layers for u in layer]
    kind = units[0].kind
    if gates is not None:
        cols = [gates.write[u.layer][..., u.index] for u in units]
        return UnitSet(name, kind, "write-gate", units, torch.stack(cols, -1)), gates, ""
    if "mask" not in getattr(model.blocks[0].mixer, "intervention_modes", ()):
        return None, None, f"mixer '{model.spec.mixer}' records no gates and cannot mask units"
    cols = []
    for block, x, layer_units in zip(model.blocks, xs, layers):
        indices = [u.index for u in layer_units]
        fast = projected_contributions(block.mixer, x, indices)
        cols.extend(fast if fast is not None else contributions(block.mixer, x, indices))
    return UnitSet(name, kind, "contribution", units, torch.stack(cols, -1)), None, ""


@torch.no_grad()
def contributions(mixer, x: torch.Tensor, indices: list[int]) -> list[torch.Tensor]:
    """||y - y(unit masked)|| per token for each unit in ``indices``: [n, T] each."""
    base = torch.cat([mixer(x[s : s + BATCH_WINDOWS])[0] for s in range(0, len(x), BATCH_WINDOWS)])
    out = []
    for u in indices:
        with mixer.intervene([u], "mask"):
            y = torch.cat([mixer(x[s : s + BATCH_WINDOWS])[0] for s in range(0, len(x), BATCH_WINDOWS)])
        out.append((base - y).norm(dim=-1).float())
    return out


def output_projection(mixer) -> tuple[torch.nn.Linear, int] | None:
    """(the linear map whose input blocks ``intervene(..., "mask")`` zeroes, channels per unit), or None.

    Attention masks head outputs before ``o_proj`` (one head = ``head_dim`` channels); the routed mixers (Mamba,
    DeltaNet) name their projection and block width themselves."""
    if hasattr(mixer, "output_projection") and hasattr(mixer, "_unit_width"):
        return mixer.output_projection(), mixer._unit_width()
    if getattr(mixer, "name", "") == "attention" and hasattr(mixer, "o_proj"):
        return mixer.o_proj, mixer.head_dim
    return None


@torch.no_grad()
def projected_contributions(mixer, x: torch.Tensor, indices: list[int]) -> list[torch.Tensor] | None:
    """||W_out[:, block_u] h[block_u]|| per token for each unit u in ``indices`` ([n, T] each), from one forward
    that captures the output projection's input h; None when the mixer's output projection is not known."""
    found = output_projection(mixer)
    if found is None:
        return None
    proj, width = found
    n_units = proj.in_features // width
    bad = [u for u in indices if not 0 <= u < n_units]
    if bad:
        raise ConfigError(f"interpretability: unit ids {bad} are out of range for {n_units} units of this layer.")
    captured: list[torch.Tensor] = []
    hook = proj.register_forward_pre_hook(lambda mod, args: captured.append(args[0].detach()))
    try:
        for s in range(0, len(x), BATCH_WINDOWS):
            mixer(x[s : s + BATCH_WINDOWS])
    finally:
        hook.remove()
    h = torch.cat(captured).float()  # [n, T, units * width]
    weight = proj.weight.detach().float()  # [D, units * width]
    out = []
    for u in indices:
        block = slice(u * width, (u + 1) * width)
        out.append((h[..., block] @ weight[:, block].T).norm(dim=-1))
    return out
