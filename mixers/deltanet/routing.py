"""Makes flash-linear-attention 0.6's DeltaNet and GatedDeltaNet layers run on any device, kernels routed per call.

fla's layers call Triton kernels for everything (ShortConvolution, the norms, the delta-rule ops), and Triton
has no CPU driver, so the layers fail on CPU tensors (docs/cpu_kernels.md, "The packages on a machine without
CUDA"). :func:`install` (idempotent, before first use) replaces the module-level kernel names those layers call by
:func:`mixers.common.routing.route` dispatchers: the Triton kernel runs for kernel "triton" (or, outside a mixer, for
CUDA tensors); otherwise plain torch does, using fla's own naive references where fla has them:

* ``delta_net.chunk_delta_rule`` / ``fused_recurrent_delta_rule``: ``naive.delta_rule_recurrence`` (kernel
  "recurrent"); under "naive-chunk", for several tokens and no state in or out, ``naive.delta_rule_chunkwise``
  (T padded to its chunk); under "chunk", :func:`mixers.deltanet.kernel.chunk_delta_rule` (mixbench's own
  chunked WY/UT kernel, which also carries states: prefill and continuation);
* ``gated_deltanet.chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule``:
  ``naive_recurrent_gated_delta_rule``; under "naive-chunk", for several tokens, ``naive_chunk_gated_delta_rule``;
  under "chunk", :func:`mixers.deltanet.kernel.chunk_delta_rule` with the gate;
* the short convolutions and norms the layers are built from: :func:`mixers.common.fla_modules.install`.

The naive ops take their inputs without the options fla's kernels apply internally, so those are applied here
first, as the ops' docstrings define them: ``use_qk_l2norm_in_kernel`` (q, k / sqrt(|.|^2 + 1e-6), the kernel's
eps), ``use_gate_in_kernel`` (``naive_gdn_gate``: g = -exp(A_log) softplus(g + dt_bias)),
``use_beta_sigmoid_in_kernel`` and ``allow_neg_eigval`` (beta = 2 sigmoid(beta)), ``state_v_first`` (the state
stored [V, K]). The delta-rule naive ops are head-first ([B, H, T, K]), the gated ones are not.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from mixers.common import fla_modules
from mixers.common.fla_modules import l2_norm, no_varlen, routed
from mixers.common.routing import current

#: chunk of fla's naive chunkwise ops (kernel "naive-chunk"): any chunk gives the same result, and 16 is their
#: fastest on CPU (fwd + bwd at B=16, T=256: delta rule 59 ms at 16 vs 67 at fla's default 32; gated 74 ms at 16
#: vs 300 at its default 64)
CHUNK = 16
#: calls of at most this many tokens take the recurrence under kernel "chunk" (decode steps: one token)
RECURRENT_MAX_TOKENS = 1

_INSTALLED = False


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    fla_modules.install()  # the short convolutions and norms these layers are built from
    delta_net, gated_deltanet = fla_modules.quiet_import("fla.layers.delta_net", "fla.layers.gated_deltanet")

    delta_net.chunk_delta_rule = routed(delta_net.chunk_delta_rule, _delta_rule, "q")
    delta_net.fused_recurrent_delta_rule = routed(delta_net.fused_recurrent_delta_rule, _delta_rule, "q")
    gated_deltanet.chunk_gated_delta_rule = routed(gated_deltanet.chunk_gated_delta_rule, _gated_delta_rule, "q")
    gated_deltanet.fused_recurrent_gated_delta_rule = routed(
        gated_deltanet.fused_recurrent_gated_delta_rule, _gated_delta_rule, "q"
    )
    _INSTALLED = True


def _delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                use_qk_l2norm_in_kernel=False, **unsupported):
    """``chunk_delta_rule`` / ``fused_recurrent_delta_rule`` ([B, T, H, K] in and out) via fla's naive ops."""
    from fla.ops.delta_rule.naive import delta_rule_chunkwise, delta_rule_recurrence

    from mixers.deltanet.kernel import chunk_delta_rule

    no_varlen(cu_seqlens, unsupported)
    if use_qk_l2norm_in_kernel:
        q, k = l2_norm(q), l2_norm(k)
    q, k, v, beta = (t.transpose(1, 2) for t in (q, k, v, beta))  # head-first
    T = q.shape[2]
    if current() == "chunk" and T > RECURRENT_MAX_TOKENS:
        o, final = chunk_delta_rule(q, k, v, beta, scale=q.shape[-1] ** -0.5 if scale is None else scale,
                                    initial_state=initial_state, output_final_state=output_final_state)
        return o.transpose(1, 2), final
    if scale is not None:  # the naive ops scale q by K^-0.5 themselves
        q = q * (scale * q.shape[-1] ** 0.5)
    if current() == "naive-chunk" and T > 1 and initial_state is None and not output_final_state:
        pad = (-T) % CHUNK  # zero keys and betas: padded steps change nothing before them
        if pad:
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
            beta = F.pad(beta, (0, pad))
        o, final = delta_rule_chunkwise(q, k, v, beta, chunk_size=CHUNK)
        return o[:, :, :T].transpose(1, 2).to(v.dtype), None
    o, final = delta_rule_recurrence(q, k, v, beta, initial_state=initial_state,
                                     output_final_state=output_final_state)
    return o.transpose(1, 2), final


def _gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
                      **options):
    """``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule`` (fla's signature) via fla's naive ops."""
    return torch_gated_delta_rule(_gated_kernels, q, k, v, g, beta, scale, initial_state, output_final_state,
                                  **options)


def _gated_kernels(q, k, v, g, beta, scale, initial_state, output_final_state):
    """The selected kernel on prepared inputs ([B, T, H, ...], the state [B, H, K, V])."""
    from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule, naive_recurrent_gated_delta_rule

    from mixers.deltanet.kernel import chunk_delta_rule

    if current() == "chunk" and q.shape[1] > RECURRENT_MAX_TOKENS:
        o, final = chunk_delta_rule(
            *(t.transpose(1, 2) for t in (q, k, v, beta, g)), scale=q.shape[-1] ** -0.5 if scale is None else scale,
            initial_state=initial_state, output_final_state=output_final_state,
        )
        return o.transpose(1, 2), final
    if current() == "naive-chunk" and q.shape[1] > 1:
        return naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=CHUNK, scale=scale,
                                            initial_state=initial_state, output_final_state=output_final_state)
    return naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=scale, initial_state=initial_state,
                                            output_final_state=output_final_state)


def torch_gated_delta_rule(run, q, k, v, g, beta, scale, initial_state, output_final_state, *,
                           use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, A_log=None, dt_bias=None,
                           use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, state_v_first=False,
                           cu_seqlens=None, **unsupported):
    """One of fla's gated delta-rule ops in torch (Gated DeltaNet's, and the one Gated DeltaProduct runs on its
    interleaved steps): ``run(q, k, v, g, beta, scale, initial_state, output_final_state)`` on inputs with the
    options fla's kernels apply inside applied first: q, k l2-normalised, the gate from ``A_log`` and
    ``dt_bias``, beta = (1 or 2) sigmoid(beta), beta = 1 when absent, a value-first state transposed to [K, V]
    (and the final state back)."""
    no_varlen(cu_seqlens, unsupported)
    if q.shape[2] != v.shape[2]:
        raise NotImplementedError("fla's torch path has no grouped value heads (num_v_heads > num_heads).")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:  # as fla's op
        raise ValueError("`allow_neg_eigval=True` requires `use_beta_sigmoid_in_kernel=True`.")
    if use_qk_l2norm_in_kernel:
        q, k = l2_norm(q), l2_norm(k)
    if use_gate_in_kernel:
        from fla.ops.gated_delta_rule.gate import naive_gdn_gate

        g = naive_gdn_gate(g, A_log, dt_bias)
    if beta is None:
        beta = torch.ones_like(q[..., 0])
    elif use_beta_sigmoid_in_kernel:
        beta = beta.sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    if initial_state is not None and state_v_first:
        initial_state = initial_state.transpose(-1, -2)
    o, final = run(q, k, v, g, beta, scale, initial_state, output_final_state)
    if final is not None and state_v_first:
        final = final.transpose(-1, -2).contiguous()
    return o.to(v.dtype), final
