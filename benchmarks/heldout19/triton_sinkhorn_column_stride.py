"""SuperGlue-style keypoint matching whose Triton Sinkhorn kernel reads the column pass with a stride.

Matching 8 image pairs of 2,048 keypoints each (256-d descriptors, a learned final projection,
fp32 cosine scores / eps 0.1) with log-domain Sinkhorn, 100 iterations, uniform marginals, then mutual
nearest matches on the transport plan. The user's own Triton kernel computes one Sinkhorn
half-iteration, `out[o] = log_marginal - logsumexp_i(S[o, i] + potential[i])`, one program per
output row, the whole 2,048-long reduction in one block, with the strides passed in. The row pass
reads S along its contiguous dimension; the column pass calls the same kernel on the transposed
view (outer stride 1, inner stride 2,048): every lane of a warp loads from a different 8 KB-apart
row, so each load touches 32 memory sectors for 32 floats. The plan S does not change during the
100 iterations.

  baseline                 column pass on `S.transpose(1, 2)`'s strides (uncoalesced loads)
  --variant transposed_copy   one `S.transpose(1, 2).contiguous()` per solve; both passes read rows

Same scores and kernel; the fp32 results may differ in the last bits (the reduction's order
follows the load layout).
"""

import math
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the CPU check runs the kernel in Triton's interpreter

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options

DIM, EPS = 256, 0.1
if CUDA:
    PAIRS, KEYPOINTS, ITERS = 8, 2048, 100
else:
    PAIRS, KEYPOINTS, ITERS = 2, 32, 6
BLOCK = triton.next_power_of_2(KEYPOINTS)


@triton.jit
def sinkhorn_half(s_ptr, pot_ptr, out_ptr, n_inner, s_batch, s_outer, s_inner, pot_batch, out_batch,
                  log_marginal, BLOCK: tl.constexpr):
    """out[b, o] = log_marginal - logsumexp_i(S[b, o, i] + pot[b, i]) for one (o, b) per program."""
    o = tl.program_id(0)
    b = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_inner
    s = tl.load(s_ptr + b * s_batch + o * s_outer + offs * s_inner, mask=mask, other=-float("inf"))
    p = tl.load(pot_ptr + b * pot_batch + offs, mask=mask, other=0.0)
    vals = s + p
    m = tl.max(vals, axis=0)
    lse = m + tl.log(tl.sum(tl.exp(vals - m), axis=0))
    tl.store(out_ptr + b * out_batch + o, log_marginal - lse)


def half_iteration(s: torch.Tensor, pot: torch.Tensor, out: torch.Tensor, log_marginal: float) -> None:
    """Launch over a (B, outer, inner) view of the scores with whatever strides it has."""
    b, n_outer, n_inner = s.shape
    sinkhorn_half[(n_outer, b)](s, pot, out, n_inner, s.stride(0), s.stride(1), s.stride(2),
                                pot.stride(0), out.stride(0), log_marginal, BLOCK=BLOCK, num_warps=8)


def sinkhorn(scores: torch.Tensor, iters: int, transposed_copy: bool) -> torch.Tensor:
    """Log transport plan log P = S + u_i + v_j for uniform marginals."""
    b, n, m = scores.shape
    u = torch.zeros(b, n, device=scores.device)
    v = torch.zeros(b, m, device=scores.device)
    cols = scores.transpose(1, 2).contiguous() if transposed_copy else scores.transpose(1, 2)
    log_mu, log_nu = -math.log(n), -math.log(m)
    for _ in range(iters):
        half_iteration(scores, v, u, log_mu)  # rows: u_i = log mu - LSE_j(S_ij + v_j)
        half_iteration(cols, u, v, log_nu)  # columns: v_j = log nu - LSE_i(S_ij + u_i)
    return scores + u[:, :, None] + v[:, None, :]


def main() -> None:
    args = options(__doc__, ("transposed_copy",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        proj = torch.nn.Linear(DIM, DIM)  # SuperGlue's final projection
    g = torch.Generator(device=DEVICE).manual_seed(1)
    total_matches = torch.zeros((), device=DEVICE, dtype=torch.float64)
    total_conf = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for _ in range(args.steps):
            timer.tick()
            # image 1's keypoints: a shuffled, noisy copy of image 0's for 3/4 of them, new ones for the rest
            d0 = F.normalize(torch.randn(PAIRS, KEYPOINTS, DIM, generator=g, device=DEVICE), dim=-1)
            perm = torch.argsort(torch.rand(PAIRS, KEYPOINTS, generator=g, device=DEVICE), dim=1)
            d1 = torch.gather(d0, 1, perm[..., None].expand(-1, -1, DIM))
            d1 = d1 + 0.08 * torch.randn(d1.shape, generator=g, device=DEVICE)
            fresh = torch.rand(PAIRS, KEYPOINTS, 1, generator=g, device=DEVICE) < 0.25
            d1 = F.normalize(torch.where(fresh, torch.randn(d1.shape, generator=g, device=DEVICE), d1), dim=-1)
            m0, m1 = F.normalize(proj(d0), dim=-1), F.normalize(proj(d1), dim=-1)
            scores = torch.bmm(m0, m1.transpose(1, 2)) / EPS  # cosine similarity / temperature
            log_p = sinkhorn(scores, ITERS, args.variant == "transposed_copy")
            best0, idx0 = log_p.max(2)
            _, idx1 = log_p.max(1)
            mutual = torch.gather(idx1, 1, idx0) == torch.arange(KEYPOINTS, device=DEVICE)[None]
            total_matches += mutual.sum()
            total_conf += (best0.exp() * KEYPOINTS).double().mean()
            timer.end()
    timer.report(f"triton_sinkhorn_column_stride variant={args.variant or 'baseline'} mutual matches "
                 f"{total_matches.item() / args.steps:.2f} mean confidence {total_conf.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
