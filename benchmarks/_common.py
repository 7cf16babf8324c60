"""What every benchmark script shares: the machine line printed with each table, and models at a preset's backbone.

Every timing itself comes from :func:`harness.timing.interleaved` (docs/ARCHITECTURE.md, "Speed").
"""

from __future__ import annotations

import os


def load_average() -> str:
    """The 1/5/15-minute load averages, for the line printed with every figure."""
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def machine_line() -> str:
    import torch

    from harness.store.provenance import threading_policy

    policy = threading_policy()
    return (f"torch {torch.__version__}, {os.cpu_count()} cores, {policy['threads']} intra-op / "
            f"{policy['interop_threads']} inter-op threads, OMP_WAIT_POLICY {policy['omp_wait_policy']}, "
            f"GOMP_SPINCOUNT {policy['gomp_spincount']}, "
            f"load average {load_average()}")


def set_threads(threads: int) -> None:
    """Torch's threads and denormals as the CLI sets them: ``threads`` intra-op threads (0: torch's default), and
    denormals flushed, so decayed sums do not run at denormal speed."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)


def quick_backbone(preset: str = "quick"):
    from harness.config import BackboneConfig, get_preset

    p = get_preset(preset)
    return BackboneConfig(vocab_size=p.vocab_size, **p.backbone), p.train["batch_size"]


def build(mixer: str, backbone, kernel: str | None = None, mixer_config: dict | None = None):
    """A model of ``mixer`` on ``backbone`` (seed 0) on the CPU, on ``kernel`` (None: the mixer's CPU default)."""
    import torch

    from harness.model.backbone import build_model
    from harness.config import ModelSpec

    model = build_model(ModelSpec(mixer, mixer_config or {}, backbone), seed=0)
    model.set_kernel(kernel, torch.device("cpu"))
    return model


def random_tokens(backbone, batch: int):
    """``batch`` sequences of ``context + 1`` random token ids (inputs and their next tokens), seed 0."""
    import torch

    return torch.randint(0, backbone.vocab_size, (batch, backbone.context + 1),
                         generator=torch.Generator().manual_seed(0))


def train_step(model, optimizer, tokens):
    """One training step on ``tokens`` as ``mixbench train`` takes it (forward, loss, backward, optimizer step), as
    a :class:`harness.timing.Candidate` function."""
    from harness.running.training import lm_loss

    def step(_):
        loss = lm_loss(model, tokens[:, :-1], tokens[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def fmt_ratio(ratio) -> str:
    """``median [low, high]`` of a :class:`harness.timing.Ratio` (bootstrap over paired rounds)."""
    iv = ratio.interval
    return f"{ratio.median:.2f} [{iv.low:.2f}, {iv.high:.2f}]" if iv is not None else f"{ratio.median:.2f}"


def compare_steps(title: str, candidates, rounds: int) -> None:
    """Time training-step candidates interleaved and print each one's s/step and its ratio to the first."""
    from harness.timing import interleaved

    start = machine_line()
    timings = interleaved(candidates, rounds)
    print(f"\n{title}")
    print(f"at start: {start}\nat end:   load average {load_average()}")
    first = candidates[0].name
    for c in candidates:
        print(f"{c.name:<16}{timings.median(c.name):>8.3f} s/step{fmt_ratio(timings.ratio(c.name, first)):>22}")
