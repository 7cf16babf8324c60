"""``mixbench mixers --table``: every registered mixer's cost at one backbone, as a Markdown table (docs/mixers.md).

Each mixer is built at the preset's width (seed 0, layer 1 of the preset's depth) and asked, through the mixer
contract only, for its decode state after ``T`` tokens (:meth:`Mixer.state_size`), its FLOPs per token
(:meth:`Mixer.flops_per_token`), its kernels (the reference, and what ``default_kernel`` picks on CPU and on CUDA
in this installation) and the paper it declares (a ``paper`` class attribute, where given). A mixer that cannot
be built at the preset is listed with the reason instead of numbers. A mixer that declares no ``flops_per_token``
gets the contract's estimate (2 FLOPs per weight), marked :data:`ESTIMATED` so it is not read as a count.

Building every mixer takes a quarter of a minute, so the text is cached with the listings
(:mod:`harness.reporting.listings`, :func:`table_text`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MixerCost:
    name: str
    paper: str
    state_floats: int | None
    state_grows: bool
    flops_forward: float | None
    kernels: tuple[str, ...]
    cpu_default: str
    cuda_default: str
    note: str = ""
    flops_estimated: bool = False


#: the mark after an estimated FLOP count (the contract's 2 per weight, not the mixer's own formula)
ESTIMATED = "~"
LEGEND = (f"A trailing {ESTIMATED} marks an estimate: the mixer declares no flops_per_token, so it counts 2 FLOPs per "
          "weight and leaves out its sequence kernel (docs/flops.md).")


def flops_estimated(mixer) -> bool:
    """Whether ``mixer`` (an instance or class) uses :meth:`Mixer.flops_per_token`'s fallback, an undercount."""
    from harness.mixer import Mixer

    cls = mixer if isinstance(mixer, type) else type(mixer)
    return cls.flops_per_token is Mixer.flops_per_token


def mixer_costs(preset: str = "quick") -> list[MixerCost]:
    import torch

    from harness.config import get_preset
    from harness.errors import MixbenchError
    from harness.registry import MIXERS

    backbone = get_preset(preset).backbone
    d, T, depth = backbone["d_model"], backbone["context"], backbone["n_layers"]
    rows = []
    for entry in MIXERS.entries():
        cls = entry.cls
        paper = getattr(cls, "paper", "")
        try:
            torch.manual_seed(0)
            mixer = cls(entry.make_config({}), d, 1, depth)
        except (MixbenchError, ImportError, RuntimeError) as exc:
            rows.append(MixerCost(entry.name, paper, None, False, None, tuple(cls.kernels), "", "",
                                  note=f"not built at {preset}: {exc}"))
            continue
        state, later = mixer.state_size(T), mixer.state_size(2 * T)
        rows.append(MixerCost(
            entry.name, paper, state, later > state, mixer.flops_per_token(T).forward,
            tuple(type(mixer).kernels), mixer.default_kernel(torch.device("cpu")),
            mixer.default_kernel(torch.device("cuda")), flops_estimated=flops_estimated(mixer),
        ))
    return rows


def table_text(preset: str = "quick") -> str:
    """What ``mixbench mixers --table PRESET`` prints (built each time; the CLI caches it)."""
    return render(mixer_costs(preset), preset)


def render(rows: list[MixerCost], preset: str = "quick") -> str:
    from harness.config import get_preset

    backbone = get_preset(preset).backbone
    T = backbone["context"]
    lines = [
        f"Per layer at preset {preset} (d_model {backbone['d_model']}, context {T}); state in floats per sequence "
        f"after T = {T} tokens ('grows' where it grows with T); forward FLOPs per token (training: 3x).",
        "",
        "| mixer | paper | state at T | FLOPs/token (fwd) | reference kernel | CPU default | CUDA default |",
        "|---|---|---:|---:|---|---|---|",
    ]
    for r in rows:
        if r.state_floats is None:
            lines.append(f"| {r.name} | {r.paper or '-'} | - | - | {r.kernels[0]} | - | - |")
            continue
        state = f"{r.state_floats:,}" + (" (grows)" if r.state_grows else "")
        flops = f"{r.flops_forward:,.0f}" + (ESTIMATED if r.flops_estimated else "")
        lines.append(f"| {r.name} | {r.paper or '-'} | {state} | {flops} | "
                     f"{r.kernels[0]} | {r.cpu_default} | {r.cuda_default} |")
    notes = [f"- {r.name}: {r.note}" for r in rows if r.note]
    legend = [LEGEND] if any(r.flops_estimated for r in rows) else []
    return "\n".join(lines + ([""] + legend + notes if legend or notes else [])) + "\n"
