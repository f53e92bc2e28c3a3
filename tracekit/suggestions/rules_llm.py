"""Rule about LLM training layers: Liger-style fused kernels for unfused RMSNorm, SwiGLU, RoPE and cross-entropy chains."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import layers
from tracekit.suggestions.common import Scope, fmt_us, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion

# An LLM block: at least one of these chains besides the loss (a vision model's cross-entropy alone is
# not one; Liger's fused linear + cross-entropy pays off at vocabulary-sized logits).
BLOCK_KINDS = frozenset({layers.RMS_NORM, layers.SWIGLU, layers.ROPE})
LIGER = {layers.RMS_NORM: "LigerRMSNorm", layers.SWIGLU: "LigerSwiGLUMLP", layers.ROPE: "liger_rotary_pos_emb",
         layers.CROSS_ENTROPY: "LigerFusedLinearCrossEntropyLoss"}
FUSED_MIN_PCT = 2.0  # silent below 2 % of the step


def _kinds(label: str) -> set[str]:
    return set(label.split("+"))


def fused_llm_kernels(analysis: Analysis) -> Suggestion | None:
    """Each chain segment (the kernels between two matrix kernels that hold an anchor op of the chain)
    done by one fused kernel that moves about as much as one of its kernels: its time − its mean kernel time."""
    scope = Scope.of(analysis)
    rows, total, before = [], 0.0, 0.0
    for r, table in rank_tables(analysis, "llm_chains"):
        if table is None or not len(table):
            continue
        seen = set().union(*(_kinds(str(x)) for x in table[layers.LC_KIND]))
        if not seen & BLOCK_KINDS:
            continue
        for row in table.to_dict("records"):
            t, fused = float(row[layers.LC_TIME_US]), float(row[layers.LC_FUSED_US])
            if t - fused <= 0:
                continue
            total += t - fused
            before += t
            kinds = sorted(_kinds(str(row[layers.LC_KIND])))
            rows.append({"rank": r.rank, "chain": row[layers.LC_KIND], "ops": row[layers.LC_OPS],
                         "fused_kernel": " + ".join(LIGER.get(k, k) for k in kinds),
                         "segments_per_step": row[layers.LC_SEGMENTS] / scope.steps,
                         "kernels_per_step": row[layers.LC_KERNELS] / scope.steps, "time_us": t,
                         "fused_us": fused, "saving_us": t - fused})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = (f"Σ over the chain segments (the kernels between two GEMM/attention kernels that launch the "
               f"chain's aten ops) of segment time − its mean kernel time (one fused kernel reading the inputs and "
               f"writing the outputs once) = {fmt_us(before / scope.ranks)} − {fmt_us((before - total) / scope.ranks)} "
               f"= {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    chains = sorted({k for x in rows for k in _kinds(str(x["chain"]))})
    kernels = sum(x["kernels_per_step"] for x in rows) / scope.ranks
    title = (f"Use fused LLM kernels (Liger Kernel, or torch.compile): unfused {', '.join(chains)} chains launch "
             f"{kernels:.0f} small kernels per step")
    return suggestion("fused_llm_kernels", title, saving, scope, formula, rows, min_pct=FUSED_MIN_PCT)
