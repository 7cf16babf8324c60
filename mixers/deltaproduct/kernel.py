"""The gated DeltaProduct recurrence on CPU: fla's reference and a chunked form (kernels ``recurrent``, ``chunk``).

Per head, with the state ``S`` [K, V], ``n`` Householder steps per token (keys ``k_{t,j}``, values ``v_{t,j}``,
strengths ``beta_{t,j}``), the token's log-decay ``g_t`` (0 without the forget gate) and its query ``q_t``:

    S <- exp(g_t) S;   for j = 1..n:  S <- S + beta_{t,j} k_{t,j} (v_{t,j} - S^T k_{t,j})^T;   o_t = S^T (scale q_t)

that is ``S_t = exp(g_t) prod_j (I - beta_{t,j} k_{t,j} k_{t,j}^T) S_{t-1} + ...``, the product of ``n``
generalised Householder transitions per token (Siems et al., 2025), as flash-linear-attention's
``naive_recurrent_gated_delta_product`` computes it (:func:`recurrent_gated_delta_product`, the reference).

Those ``n T`` steps are exactly the gated delta rule over the interleaved sequence of ``n T`` steps in which step
``(t, j)`` has key ``k_{t,j}``, value ``v_{t,j}`` and strength ``beta_{t,j}``, the log-decay ``g_t`` at ``j = 1``
and 0 at the others, and the query ``q_t`` at ``j = n`` and 0 at the others (a zero query reads nothing): the
outputs at every n-th step are the tokens' outputs. fla's own chunk kernel works that way (it interleaves the
gate and reads every n-th output), and so does :func:`chunk_gated_delta_product`, with mixbench's chunked WY/UT
delta rule (:func:`mixers.deltanet.kernel.chunk_delta_rule`) on the interleaved sequence. Its chunks hold
whole tokens (:func:`chunk_steps`), so the token-level chunk boundaries the conformance gate straddles are
:func:`tokens_per_chunk`. Layout is fla's: ``q`` [B, T, H, K], ``k`` [B, n T, H, K], ``v`` [B, n T, H, V],
``beta`` [B, n T, H], ``g`` [B, T, H] or None, states [B, H, K, V].
"""

from __future__ import annotations

import torch

from mixers.deltanet import kernel as delta_kernel


def tokens_per_chunk(num_householder: int) -> int:
    """Tokens per chunk of :func:`chunk_gated_delta_product`: about ``delta_kernel.CHUNK`` interleaved steps (the
    chunk length the delta rule was tuned at) in whole tokens (16 tokens at n = 2)."""
    return max(1, round(delta_kernel.CHUNK / num_householder))


def chunk_steps(num_householder: int) -> int:
    """Interleaved steps per chunk: :func:`tokens_per_chunk` whole tokens."""
    return num_householder * tokens_per_chunk(num_householder)


def interleave(q: torch.Tensor, g: torch.Tensor | None,
               num_householder: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The per-token query and log-decay ([B, T, H, ...]) as per-step ones ([B, n T, H, ...]): the query at each
    token's last step, the log-decay at its first, zeros elsewhere."""
    n = num_householder
    if n == 1:
        return q, g
    q_steps = torch.cat([q.new_zeros(q.shape[0], q.shape[1], n - 1, *q.shape[2:]), q.unsqueeze(2)], 2).flatten(1, 2)
    g_steps = None
    if g is not None:
        g_steps = torch.cat([g.unsqueeze(2), g.new_zeros(g.shape[0], g.shape[1], n - 1, *g.shape[2:])], 2).flatten(1, 2)
    return q_steps, g_steps


def chunk_gated_delta_product(q, k, v, g, beta, num_householder: int, *, scale: float, initial_state=None,
                              output_final_state: bool = False):
    """Kernel ``chunk``: the chunked delta rule over the interleaved sequence (see the module docstring). Returns
    ``o`` [B, T, H, V] in v's dtype and the final state [B, H, K, V] (fp32) or None; computes in fp32."""
    n = num_householder
    q_steps, g_steps = interleave(q, g, n)
    o, final = delta_kernel.chunk_delta_rule(q_steps, k, v, beta, g_steps, scale=scale, initial_state=initial_state,
                                           output_final_state=output_final_state, chunk_size=chunk_steps(n))
    if n > 1:
        o = o.unflatten(1, (q.shape[1], n))[:, :, -1]
    return o, final


def recurrent_gated_delta_product(q, k, v, g, beta, num_householder: int, *, scale: float, initial_state=None,
                                  output_final_state: bool = False):
    """Kernel ``recurrent``: fla's ``naive_recurrent_gated_delta_product`` (looked up at each call), ``o`` in
    v's dtype, the state in fp32 (None unless ``output_final_state``)."""
    from fla.ops.gated_delta_product import naive

    o, final = naive.naive_recurrent_gated_delta_product(
        q, k, v, g, beta, scale, initial_state=None if initial_state is None else initial_state.float(),
        output_final_state=output_final_state, num_householder=num_householder,
    )
    return o.to(v.dtype), (final if output_final_state else None)
