"""Training speed of the paper's four mixers on one GPU: tokens/s, model FLOP/s and MFU, peak memory, final loss.

Why: the throughput grid times one training step at batch 1 on random tokens; this is what ``mixbench train``
does at the preset's real shape (paper-small: d_model 256, 6 layers, context 256, vocab 16384, batch 32), so its
tokens/s is the one a training run gets. It goes through the project's own code: the run spec
(``make_run_spec`` / ``bind_vocab``), the embedded corpus and its tokenizer (``load_corpus``; a 16384-id BPE is
trained and cached under $MIXBENCH_CACHE on first use), ``build_model``, and the step of ``harness/running/training.py``
(``param_groups`` + fused ``adamw``, the ``lr_at`` schedule, ``lm_loss`` under bf16 autocast on CUDA, gradient
clipping). No validation and no checkpoint is written: only the optimizer steps are timed, the batches
(``Corpus.train_batch``, the same ones ``train`` would see) are put on the device before the clock starts.

Per mixer: ``--warmup-steps`` untimed steps (Triton compilation and autotuning land there), then ``--steps``
timed ones, each between two CUDA events (``perf_counter`` on a CPU). Reported: tokens/s at the median step and
its min-max over steps, the whole timed loop's tokens/s, model FLOP/s as ``estimate_train_flops`` counts them
(6 * N * tokens, N = non-embedding parameters + the tied head) and their fraction of the device's dense bf16 peak
(MFU); for attention also with the 6 * L * T * d of causal attention scores added (PaLM's 12 * L * T * d, halved
for causality), since 6 * N leaves it out. Peak memory is ``torch.cuda.max_memory_allocated`` (None on a CPU).
One mixer's failure (out of memory, a kernel error) is its row; the others still run.

The peak comes from ``--peak-tflops``, else a datasheet table keyed on the device name, else a measured large
bf16 matmul (said so in the report: a measured rate is what the chip reaches, not its datasheet figure).

    python benchmarks/gpu_train.py [--mixers protot,attention,mamba,deltanet] [--steps 60] [--json out.json]
    python benchmarks/gpu_train.py --device cpu --preset tiny --steps 4 --warmup-steps 1   # the plumbing on a CPU
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time

import harness  # noqa: F401  (first: the threading policy is set before torch loads)
import torch

from gpu_throughput import error_text  # a sibling script (this folder is on sys.path)
from harness.model.backbone import build_model
from harness.corpus.data import load_corpus
from harness.model.specs import bind_vocab, make_run_spec
from harness.running.training import adamw, estimate_train_flops, lm_loss, lr_at, param_groups

MIXERS = "protot,attention,mamba,deltanet"
_CORPORA: dict = {}  # one corpus (and tokenizer) per data config, shared by the mixers

#: dense (no 2:4 sparsity) bf16 tensor-core TFLOP/s from the vendors' datasheets, matched as substrings of the
#: lower-cased device name, first match wins (so the NVL and PCIe parts come before their SXM siblings)
PEAK_BF16_TFLOPS = (
    ("h200 nvl", 835.0),
    ("h200", 989.0),  # H200 SXM, GH200
    ("h100 nvl", 835.0),
    ("h100 pcie", 756.0),
    ("h100", 989.0),  # H100 SXM ("NVIDIA H100 80GB HBM3")
    ("a100", 312.0),
)


def peak_flops(device: torch.device, override_tflops: float | None) -> tuple[float, str]:
    """The device's peak FLOP/s for MFU and where the figure comes from (argument, datasheet table or measured)."""
    if override_tflops:
        return override_tflops * 1e12, "--peak-tflops"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, tflops in PEAK_BF16_TFLOPS:
            if key in name.lower():
                return tflops * 1e12, f"datasheet dense bf16 ({name})"
        return _measured_matmul(device, torch.bfloat16, 8192), f"MEASURED bf16 matmul (no datasheet entry for {name})"
    # the CPU trains in fp32 (autocast is CUDA-only in harness/running/training.py), so its reference is an fp32 matmul
    return _measured_matmul(device, torch.float32, 1024), "MEASURED fp32 matmul (cpu: no datasheet figure)"


def _measured_matmul(device: torch.device, dtype: torch.dtype, n: int, repeats: int = 5) -> float:
    """The best of ``repeats`` n x n x n matmuls, after one untimed call."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_one(row: dict, args, device: torch.device, peak: float) -> None:
    """``row["mixer"]`` (``mixer`` or ``mixer:kernel``) trained for warm-up + timed steps; fills in ``row`` as it
    goes, so a failure still leaves the kernel and the steps done next to its error."""
    mixer, _, kernel = row["mixer"].partition(":")
    overrides = {"max_train_docs": args.max_train_docs} if args.max_train_docs else None
    train_overrides = {"batch_size": args.batch_size} if args.batch_size else None
    spec = make_run_spec(mixer, args.preset, train_overrides=train_overrides, data_overrides=overrides)
    # as harness.running.runner.corpus_for does, without importing the runner: its results store needs packages (fsspec
    # and the like) that a bare GPU machine may lack, and training needs none of them
    if spec.data not in _CORPORA:
        _CORPORA[spec.data] = load_corpus(spec.data, progress=False)
    corpus = _CORPORA[spec.data]
    spec = bind_vocab(spec, corpus.tokenizer.vocab_size)
    cfg, backbone = spec.train, spec.model.backbone
    total = args.warmup_steps + args.steps
    tokens = cfg.batch_size * backbone.context
    batches = [corpus.train_batch(i, cfg.batch_size, backbone.context, cfg.seed).to(device) for i in range(total)]
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(spec.model, seed=cfg.seed).to(device)
    model.set_kernel(kernel or None, device)
    optimizer = adamw(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas)
    model.train()
    cuda = device.type == "cuda"
    row.update({"kernel": model.kernel, "parameters": model.num_parameters(), "batch": cfg.batch_size,
                "context": backbone.context, "steps_done": 0})

    def step(i: int) -> torch.Tensor:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(i, total, cfg)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = lm_loss(model, batches[i][:, :-1], batches[i][:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        return loss.detach()

    losses = []
    for i in range(args.warmup_steps):
        losses.append(step(i))
        row["steps_done"] = i + 1
    _sync(device)
    seconds: list[float] = []
    events = []
    t0 = time.perf_counter()
    for i in range(args.warmup_steps, total):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            losses.append(step(i))
            end.record()
            events.append((start, end))
        else:
            s = time.perf_counter()
            losses.append(step(i))
            seconds.append(time.perf_counter() - s)
        row["steps_done"] = i + 1
    _sync(device)
    wall = time.perf_counter() - t0
    if cuda:
        seconds = [start.elapsed_time(end) / 1e3 for start, end in events]
    median = statistics.median(seconds)
    final_loss = float(losses[-1])
    flops = estimate_train_flops(model, tokens)
    row.update({
        "tokens_per_step": tokens, "timed_steps": len(seconds), "median_step_s": median,
        "tokens_per_s": tokens / median, "tokens_per_s_min": tokens / max(seconds),
        "tokens_per_s_max": tokens / min(seconds), "tokens_per_s_wall": tokens * len(seconds) / wall,
        "flops_per_step": flops, "model_flops_per_s": flops / median, "mfu": flops / median / peak,
        "first_loss": float(losses[0]), "final_loss": final_loss, "loss_finite": math.isfinite(final_loss),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
    })
    if mixer == "attention":  # the score and value matmuls, which 6 * N does not count
        attn = 6.0 * backbone.n_layers * backbone.context * backbone.d_model * tokens
        row["attention_flops_per_step"] = attn
        row["mfu_with_attention"] = (flops + attn) / median / peak


def table(report: dict) -> str:
    """The rows as text (also used by ``benchmarks/gpu_report.py``)."""
    lines = [f"{'mixer':<12}{'kernel':<14}{'tokens/s':>10}{'min-max':>17}{'model FLOP/s':>14}{'MFU':>8}"
             f"{'peak mem':>10}{'loss':>16}"]
    for r in report["rows"]:
        if "error" in r:
            done = f" after {r['steps_done']} steps" if "steps_done" in r else ""
            lines.append(f"{r['mixer']:<12}{r.get('kernel', ''):<14}ERROR{done}: {r['error'][:80]}")
            continue
        mem = "-" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / 2**30:.2f}G"
        loss = f"{r['first_loss']:.2f} -> {r['final_loss']:.2f}" if r["loss_finite"] else f"NONFINITE {r['final_loss']}"
        lines.append(f"{r['mixer']:<12}{r['kernel']:<14}{_si(r['tokens_per_s']):>10}"
                     f"{_si(r['tokens_per_s_min']) + '-' + _si(r['tokens_per_s_max']):>17}"
                     f"{_si(r['model_flops_per_s']):>14}{r['mfu']:>8.2%}{mem:>10}{loss:>16}")
        if "mfu_with_attention" in r:
            with_scores = (r["flops_per_step"] + r["attention_flops_per_step"]) / r["median_step_s"]
            lines.append(f"{'':<12}with attention's 6*L*T*d added: {_si(with_scores)} FLOP/s, "
                         f"MFU {r['mfu_with_attention']:.2%}")
    lines.append(f"tokens/s at the median of {report['steps']} timed steps (after {report['warmup_steps']} untimed), "
                 f"min-max over steps; model FLOP/s = 6*N*tokens/s")
    lines.append(f"MFU = model FLOP/s / {report['peak_tflops']:.4g} TFLOP/s ({report['peak_source']})")
    return "\n".join(lines)


def _si(x: float) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g}{prefix}"
    return f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mixers", default=MIXERS, help="mixer or mixer:kernel, comma-separated")
    parser.add_argument("--preset", default="paper-small")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=60, help="timed optimizer steps per mixer")
    parser.add_argument("--warmup-steps", type=int, default=10, help="untimed steps first (compilation, autotuning)")
    parser.add_argument("--batch-size", type=int, default=0, help="0 = the preset's")
    parser.add_argument("--max-train-docs", type=int, default=0, help="0 = the whole corpus (a smaller one for tests)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak, for MFU")
    parser.add_argument("--budget-s", type=float, default=None, help="start no new mixer after this many seconds")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup_steps < 0:
        parser.error("--steps must be >= 1 and --warmup-steps >= 0")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_train: no CUDA device here; use --device cpu to check the plumbing.", file=sys.stderr)
        return 1
    if device.type == "cpu":
        torch.set_flush_denormal(True)  # as the CLI does
    t0 = time.perf_counter()
    peak, source = peak_flops(device, args.peak_tflops)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report = {"device": name, "torch": torch.__version__, "preset": args.preset,
              "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
              "dtype": "bfloat16 autocast" if device.type == "cuda" else "float32", "steps": args.steps,
              "warmup_steps": args.warmup_steps, "peak_tflops": peak / 1e12, "peak_source": source, "rows": []}
    print(f"{name}; torch {torch.__version__}; preset {args.preset}, {report['dtype']}; peak {peak / 1e12:.4g} "
          f"TFLOP/s ({source})", flush=True)

    def save() -> None:
        if args.json:  # after every mixer: a part cut short by its time limit keeps what it measured
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)

    failed = 0
    for entry in args.mixers.split(","):
        if args.budget_s is not None and time.perf_counter() - t0 > args.budget_s:
            report["rows"].append({"mixer": entry, "error": "skipped (time budget)"})
            failed += 1
            save()
            continue
        t_mixer = time.perf_counter()
        row: dict = {"mixer": entry}
        try:
            train_one(row, args, device, peak)
        except Exception as exc:  # one mixer's failure is its row, not the run's
            row["error"] = error_text(exc)
        row["seconds"] = time.perf_counter() - t_mixer
        failed += "error" in row or not row["loss_finite"]
        report["rows"].append(row)
        print(f"  {entry}: " + (row["error"] if "error" in row else
                                f"{row['kernel']}, {_si(row['tokens_per_s'])} tok/s, MFU {row['mfu']:.2%}, "
                                f"loss {row['final_loss']:.3f}") + f" ({row['seconds']:.0f} s)", flush=True)
        save()
        gc.collect()  # the last mixer's model, optimizer state and batches, before the next one's peak memory
        if device.type == "cuda":
            torch.cuda.empty_cache()
    save()
    print(table(report))
    print(f"{time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
