"""Every mixer's declared FLOPs per token (``Mixer.flops_per_token``) against a measured count (docs/flops.md).

What is measured, on the reference kernel at small shapes, batch 2:

* products: ``torch.utils.flop_counter.FlopCounterMode`` over the whole call, forward and backward (matrix
  products, convolutions: 2 FLOPs per multiply-add);
* elementwise arithmetic inside the sequence kernel's definition (``selective_scan_ref``, fla's naive
  recurrences, ``ssd_minimal_discrete``, ProtoT's ``prefix_mean_recurrent``, attention's ``_naive``, the
  controls' forward): :class:`ElementwiseCounter`, 1 FLOP per output element of each arithmetic op (a reduction:
  per input element), in the forward only. Their backward is taken as twice the forward, the convention the
  declared counts use, because the references' autograd graphs (a Python loop over time indexing the same tensors
  at every step) accumulate zero-filled gradients of whole tensors at every step, O(T^2) additions that measure
  the reference's code, not the mixer. An op inside a kernel that is neither counted nor known to be free fails
  the test, so a kernel that changes cannot silently leave its arithmetic uncounted.

Attention declares the causal average ((T + 1) / 2 keys per query); its naive kernel also multiplies the masked
half of the scores, so attention is measured token by token through its KV cache (decode with the reference
kernel), where each query meets exactly its causal keys, forward and backward.

Declared and measured agree within 10% for forward and forward + backward at three shapes per mixer (width,
context and a config value varied) and for whole models; ``python -m tests.test_flops`` prints the table.
"""

from __future__ import annotations

import contextlib
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from harness.config import BackboneConfig, ModelSpec
from harness.mixer import FlopCount, Mixer
from harness.model.backbone import MixerLM
from harness.model.flops import model_flops_per_token, spec_flops_per_token, train_flops
from harness.registry import MIXERS

TOLERANCE = 0.10
BATCH = 2

#: arithmetic ops, 1 FLOP per output element (in-place variants included; fused ones such as softmax count once)
ELEMENTWISE = {
    "add", "sub", "rsub", "mul", "div", "neg", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "pow",
    "abs", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "sigmoid", "tanh", "softplus", "silu",
    "log_sigmoid_forward", "_softmax", "_log_softmax", "addcmul", "addcdiv", "lerp",
}
#: reductions, 1 FLOP per input element
REDUCTIONS = {"sum", "mean", "cumsum", "amax", "amin", "logsumexp"}
#: no arithmetic: views, copies, creation, indexing, masking, comparisons
FREE = {
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "expand", "alias",
    "select", "slice", "unbind", "split", "split_with_sizes", "chunk", "narrow", "as_strided", "detach", "clone",
    "contiguous", "_to_copy", "copy", "to", "lift_fresh", "cat", "stack", "repeat", "repeat_interleave", "flip",
    "roll", "constant_pad_nd", "masked_fill", "where", "tril", "triu", "index", "index_select", "gather",
    "zeros", "zeros_like", "ones", "ones_like", "empty", "empty_like", "empty_strided", "new_zeros", "new_ones",
    "new_empty", "new_empty_strided", "full", "full_like", "fill", "zero", "arange", "eq", "ne", "lt", "le", "gt",
    "ge", "logical_not", "bitwise_not", "_reshape_alias", "view_as_real", "view_as_complex", "scalar_tensor",
}


def _op_name(func) -> str:
    name = str(func._overloadpacket).split(".")[-1]
    return name[:-1] if name.endswith("_") and not name.endswith("__") and len(name) > 1 else name


class ElementwiseCounter(TorchDispatchMode):
    """Counts elementwise arithmetic while a sequence kernel runs (:meth:`wrap`); products are FlopCounterMode's."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.active = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.active:
            self._count(func, args, out)
        return out

    def _count(self, func, args, out) -> None:
        name = _op_name(func)
        if func._overloadpacket in flop_registry or name in FREE:
            return
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if not outputs:
            return
        if name in REDUCTIONS:
            self.flops += next(a for a in tree_leaves(args) if isinstance(a, torch.Tensor)).numel()
        elif name in ELEMENTWISE:
            self.flops += sum(t.numel() for t in outputs)
        else:
            raise AssertionError(f"{func} runs inside a sequence kernel and is neither counted nor known to be free; "
                                 f"add it to ELEMENTWISE, REDUCTIONS or FREE in tests/test_flops.py")

    def wrap(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            self.active += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.active -= 1

        return wrapped


def _kernel_sites(name: str) -> list[tuple[object, str]]:
    """(object, attribute) of each mixer's sequence kernel definition, as its reference kernel calls it."""
    if name == "attention":
        from mixers.attention.layer import Attention

        return [(Attention, "_naive")]
    if name == "baseconv":  # its convolutions are products (FlopCounterMode's); no elementwise kernel to count
        return []
    if name in ("none", "mean"):
        from mixers.controls.layer import NoMixing, PrefixMean

        return [(NoMixing if name == "none" else PrefixMean, "forward")]
    if name == "protot":
        from mixers.protot import layer as protot_layer

        return [(protot_layer.KERNELS, "recurrent")]
    if name in ("mamba", "mamba2"):
        from mixers.mamba import routing as mamba_routing

        mamba_routing.install()
        from mamba_ssm.modules import ssd_minimal
        from mamba_ssm.ops import selective_scan_interface

        return [(selective_scan_interface, "selective_scan_ref") if name == "mamba" else
                (ssd_minimal, "ssd_minimal_discrete")]
    if name in ("deltanet", "gated-deltanet"):
        from mixers.deltanet import routing as deltanet_routing

        deltanet_routing.install()
        import fla.ops.delta_rule.naive as delta_naive
        import fla.ops.gated_delta_rule.naive as gated_naive

        return [(delta_naive, "delta_rule_recurrence") if name == "deltanet" else
                (gated_naive, "naive_recurrent_gated_delta_rule")]
    if name in ("gla", "retnet"):
        from mixers.gla import routing

        routing.install()
        import fla.ops.gla.naive as gla_naive
        import fla.ops.simple_gla.naive as simple_naive

        return [(gla_naive, "naive_recurrent_gla") if name == "gla" else (simple_naive, "naive_recurrent_simple_gla")]
    if name == "rwkv7":
        from mixers.rwkv7 import routing as rwkv7_routing

        rwkv7_routing.install()
        import fla.ops.generalized_delta_rule.dplr.naive as dplr_naive

        return [(dplr_naive, "dplr_recurrence")]
    if name == "gated-deltaproduct":
        from mixers.deltaproduct import routing as product_routing

        product_routing.install()
        import fla.ops.gated_delta_product.naive as product_naive

        return [(product_naive, "naive_recurrent_gated_delta_product")]
    raise KeyError(name)


@contextlib.contextmanager
def counting(name: str):
    """An :class:`ElementwiseCounter` wrapped around ``name``'s kernel definition for the duration."""
    counter = ElementwiseCounter()
    saved = []
    for obj, attr in _kernel_sites(name):
        if isinstance(obj, dict):
            saved.append((obj, attr, obj[attr]))
            obj[attr] = counter.wrap(obj[attr])
        else:
            saved.append((obj, attr, obj.__dict__[attr] if isinstance(obj, type) else getattr(obj, attr)))
            setattr(obj, attr, counter.wrap(getattr(obj, attr)))
    try:
        yield counter
    finally:
        for obj, attr, value in saved:
            if isinstance(obj, dict):
                obj[attr] = value
            else:
                setattr(obj, attr, value)


def _conv_backward_flop(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                        _output_padding, _groups, output_mask, out_shape=None, **kwargs) -> int:
    """A convolution's gradients, each as many multiply-adds as the forward. FlopCounterMode's own formula
    ignores groups in the weight's gradient and counts a depthwise conv's d times over (torch 2.13)."""
    spatial = (x_shape if transposed else grad_out_shape)[2:]
    forward = 2 * x_shape[0] * math.prod(w_shape) * math.prod(spatial)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


def products_counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping={torch.ops.aten.convolution_backward: _conv_backward_flop})


def measure(name: str, run) -> FlopCount:
    """Measured FLOPs of ``run()`` (which returns a scalar loss): forward as FlopCounterMode's products plus the
    kernel's elementwise arithmetic, backward as FlopCounterMode's products plus twice that arithmetic."""
    with counting(name) as counter:
        products = products_counter()
        with products, counter:
            loss = run()
        gradients = products_counter()
        with gradients:
            loss.backward()
    elementwise = counter.flops
    return FlopCount(products.get_total_flops() + elementwise, gradients.get_total_flops() + 2 * elementwise)


#: stepwise through the decode state: attention, whose naive kernel also multiplies the masked scores, and
#: baseconv, whose direct kernel multiplies the zero taps of its Toeplitz matrix
STEPWISE = {"attention", "baseconv"}

#: per mixer: (d_model, context, config, layer_idx) at three shapes: width, length and a config value varied
SHAPES: dict[str, list[tuple[int, int, dict, int]]] = {
    "attention": [(32, 24, {}, 0), (64, 40, {"n_heads": 2}, 0), (48, 32, {"n_heads": 4, "n_kv_heads": 2}, 0)],
    "mamba": [(32, 24, {}, 0), (64, 40, {"d_state": 8}, 0), (48, 32, {"expand": 1, "d_conv": 3, "dt_rank": 4}, 0)],
    "mamba2": [(32, 24, {"headdim": 16}, 0), (64, 70, {"headdim": 32, "d_state": 32}, 0),
               (48, 40, {"headdim": 16, "d_state": 16, "ngroups": 2}, 0)],
    "deltanet": [(32, 24, {}, 0), (64, 40, {"num_heads": 2, "use_gate": True}, 0),
                 (48, 70, {"num_heads": 3, "expand_v": 2.0, "use_beta": False}, 0)],
    "gated-deltanet": [(32, 24, {}, 0), (64, 40, {"num_heads": 2, "head_dim": 16}, 0),
                       (48, 32, {"use_gate": False, "expand_v": 1.0}, 0)],
    "gla": [(32, 24, {}, 0), (64, 40, {"num_heads": 2, "expand_k": 1.0}, 0),
            (48, 70, {"num_heads": 3, "use_short_conv": True, "gate_low_rank_dim": 8}, 0)],
    "retnet": [(32, 24, {}, 0), (64, 40, {"num_heads": 2, "expand_v": 1.0}, 0),
               (48, 70, {"num_heads": 3, "use_short_conv": True, "use_output_gate": False}, 0)],
    "gated-deltaproduct": [(32, 24, {}, 0), (64, 40, {"num_heads": 2, "head_dim": 16, "num_householder": 3}, 0),
                           (48, 32, {"use_output_gate": False, "use_forget_gate": False, "expand_v": 1.0}, 0)],
    "rwkv7": [(32, 24, {}, 0), (64, 40, {"head_dim": 16}, 0), (48, 70, {"head_dim": 24, "gate_low_rank_dim": 16}, 0)],
    "protot": [(32, 24, {}, 0), (64, 40, {"n_prototypes": 8}, 1), (48, 32, {"n_prototypes": 16}, 2)],
    "baseconv": [(32, 24, {}, 0), (64, 40, {"filter_len": 16}, 0), (48, 32, {"short_conv": 4, "filter_len": 64}, 0)],
    "none": [(32, 24, {}, 0), (64, 40, {}, 0), (48, 32, {}, 0)],
    "mean": [(32, 24, {}, 0), (64, 40, {}, 0), (48, 32, {}, 0)],
}
CASES = [(name, *shape) for name, shapes in SHAPES.items() for shape in shapes]


def _case_id(case) -> str:
    name, d, T, cfg, layer = case
    extra = ",".join(f"{k}={v}" for k, v in cfg.items())
    return f"{name}-d{d}-T{T}-L{layer}" + (f"-{extra}" if extra else "")


def build_mixer(name: str, d_model: int, config: dict, layer_idx: int, n_layers: int = 4) -> Mixer:
    entry = MIXERS.get(name)
    mixer = entry.cls(entry.make_config(config), d_model, layer_idx, n_layers)
    mixer.set_kernel("reference")
    return mixer


def over_positions(call, T: int, state) -> torch.Tensor:
    """``call(positions, state) -> (y, state)`` over T positions: at once without a ``state``, else one position at a
    time from it (the STEPWISE mixers), the outputs concatenated."""
    if state is None:
        return call(slice(0, T), None)[0]
    outs = []
    for t in range(T):
        y, state = call(slice(t, t + 1), state)
        outs.append(y)
    return torch.cat(outs, dim=1)


def measure_mixer(name: str, mixer: Mixer, T: int) -> FlopCount:
    x = torch.randn(BATCH, T, mixer.d_model, requires_grad=True)  # its gradient is wanted, as in a model

    def run() -> torch.Tensor:
        state = mixer.init_state(BATCH, x.device, x.dtype) if name in STEPWISE else None
        return over_positions(lambda at, state: mixer(x[:, at], state), T, state).square().mean()

    return measure(name, run) * (1.0 / (BATCH * T))


def _check(declared: FlopCount, measured: FlopCount, what: str) -> None:
    for part in ("forward", "total"):
        d, m = getattr(declared, part), getattr(measured, part)
        assert abs(d / m - 1) <= TOLERANCE, (
            f"{what}: declared {part} {d:,.0f} FLOPs per token, measured {m:,.0f} (ratio {d / m:.3f}); "
            f"fix the formula, not the tolerance"
        )


def test_every_builtin_mixer_declares_its_own_count():
    # fla:<LayerClass> names (built on first use by the adapter) count by the fallback rule: not built-ins
    builtin = [e for e in MIXERS.entries() if e.cls.__module__.startswith("mixers.") and ":" not in e.name]
    assert {e.name for e in builtin} <= set(SHAPES), "give every built-in mixer shapes in SHAPES"
    for entry in builtin:
        assert entry.cls.flops_per_token is not Mixer.flops_per_token, entry.name


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_declared_flops_match_measured(case):
    name, d, T, config, layer = case
    mixer = build_mixer(name, d, config, layer)
    _check(mixer.flops_per_token(T), measure_mixer(name, mixer, T), _case_id(case))


def _tiny_spec(name: str, context: int) -> ModelSpec:
    return ModelSpec(name, {}, BackboneConfig(d_model=32, n_layers=3, context=context, vocab_size=64))


def measure_model(name: str, model: MixerLM, T: int) -> FlopCount:
    model.set_kernel("reference")
    ids = torch.randint(0, model.config.vocab_size, (BATCH, T + 1))

    def run() -> torch.Tensor:
        states = model.init_states(BATCH) if name in STEPWISE else None
        logits = over_positions(lambda at, states: model(ids[:, at], states), T, states)
        return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

    return measure(name, run) * (1.0 / (BATCH * T))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_model_flops_match_measured(name):
    T = 40
    model = MixerLM(_tiny_spec(name, T))
    declared = model_flops_per_token(model, T)
    _check(declared, measure_model(name, model, T), f"MixerLM({name}, d32 L3 T{T})")
    assert train_flops(model, T, 1000) == pytest.approx(1000 * declared.total)


def test_spec_flops_need_no_weights():
    spec = _tiny_spec("protot", 40)
    assert spec_flops_per_token(spec) == model_flops_per_token(MixerLM(spec), 40)


def test_training_records_the_count():
    from harness.running.training import estimate_train_flops

    model = MixerLM(_tiny_spec("attention", 40))
    assert estimate_train_flops(model, 4096) == pytest.approx(train_flops(model, 40, 4096))


def test_default_counts_the_weights_of_a_plugin():
    class Plugin(Mixer):
        def __init__(self, d_model: int):
            super().__init__(None, d_model, 0, 1)
            self.proj = torch.nn.Linear(d_model, 2 * d_model)
            self.scale = torch.nn.Parameter(torch.ones(d_model))  # 1-D: not a product

    count = Plugin(8).flops_per_token(16)
    assert count == FlopCount(2.0 * 8 * 16, 4.0 * 8 * 16)
    assert count.total == 6.0 * 8 * 16
    assert count + count == count * 2 == 2 * count


def agreement_rows() -> list[tuple[str, float, float, float, float]]:
    """(case, declared forward, measured forward, declared total, measured total) for every case and model."""
    rows = []
    for case in CASES:
        name, d, T, config, layer = case
        mixer = build_mixer(name, d, config, layer)
        declared, measured = mixer.flops_per_token(T), measure_mixer(name, mixer, T)
        rows.append((_case_id(case), declared.forward, measured.forward, declared.total, measured.total))
    for name in sorted(SHAPES):
        model = MixerLM(_tiny_spec(name, 40))
        declared, measured = model_flops_per_token(model, 40), measure_model(name, model, 40)
        rows.append((f"MixerLM {name} d32 L3 T40", declared.forward, measured.forward, declared.total, measured.total))
    return rows


if __name__ == "__main__":  # the agreement table of docs/flops.md
    torch.manual_seed(0)
    print("| case | declared fwd | measured fwd | ratio | declared fwd+bwd | measured fwd+bwd | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for case, df, mf, dt, mt in agreement_rows():
        print(f"| {case} | {df:,.0f} | {mf:,.0f} | {df / mf:.3f} | {dt:,.0f} | {mt:,.0f} | {dt / mt:.3f} |")
