"""Rules about LLM layers: Liger-style fused kernels for unfused RMSNorm, SwiGLU, RoPE and cross-entropy chains in training; in inference, the logits of the last position only."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import full_logits as fl
from tracekit.analyzers.detectors import layers
from tracekit.analyzers.kernels import ATTENTION, CLASS
from tracekit.model.outlook import Transform
from tracekit.model.whatif import scale_rows
from tracekit.suggestions.common import Scope, fmt_us, in_headline, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion

# An LLM block: at least one of these chains besides the loss (a vision model's cross-entropy alone is
# not one; Liger's fused linear + cross-entropy pays off at vocabulary-sized logits).
BLOCK_KINDS = frozenset({layers.RMS_NORM, layers.SWIGLU, layers.ROPE})
LIGER = {layers.RMS_NORM: "LigerRMSNorm", layers.SWIGLU: "LigerSwiGLUMLP", layers.ROPE: "liger_rotary_pos_emb",
         layers.CROSS_ENTROPY: "LigerFusedLinearCrossEntropyLoss"}
FUSED_MIN_PCT = 2.0  # silent below 2 % of the step


def _kinds(label: str) -> set[str]:
    return set(label.split("+"))


def _has_attention(r: RankAnalysis) -> bool:
    """Whether the rank runs attention: an attention kernel (flash, cuDNN, memory-efficient, flex) or
    attention written out in ops (patterns.attention); an LLM block always holds one (held-out
    unfold_conv, a ResNet whose weight standardisation has an rsqrt and a neg, holds none)."""
    classes = r.classification.table[CLASS].to_numpy(dtype=object)
    return bool((classes == ATTENTION).any()) or (r.patterns is not None and len(r.patterns.attention) > 0)


def claims_chains(r: RankAnalysis, table: pd.DataFrame) -> bool:
    """Whether fused_llm_kernels prices the rank's LLM chains (patterns.llm_chains): a block kind among
    them (RMSNorm, SwiGLU, RoPE) in a rank that runs attention."""
    kinds = set().union(*(_kinds(str(x)) for x in table[layers.LC_KIND])) if len(table) else set()
    return bool(kinds & BLOCK_KINDS) and _has_attention(r)


def loss_chains(r: RankAnalysis) -> pd.DataFrame | None:
    """The rank's cross-entropy chains (patterns.llm_chains rows of that kind alone: log_softmax, NLL and
    their backward, launched eagerly) when fused_llm_kernels does not price them (no LLM block kind or no
    attention: a recommender's or a classifier's loss); None otherwise. torch.compile fuses such a chain
    with its cast (fuse_elementwise)."""
    table = r.patterns.llm_chains if r.patterns is not None else None
    if table is None or not len(table) or claims_chains(r, table):
        return None
    ce = table[table[layers.LC_KIND].astype(str) == layers.CROSS_ENTROPY]
    return ce if len(ce) else None


def fused_llm_kernels(analysis: Analysis) -> Suggestion | None:
    """Each chain segment (the kernels between two matrix kernels that hold an anchor op of the chain)
    done by one fused kernel that moves about as much as one of its kernels: its time − its mean kernel time."""
    scope = Scope.of(analysis)
    rows, total, before = [], 0.0, 0.0
    for r, table in rank_tables(analysis, "llm_chains"):
        if table is None or not len(table):
            continue
        if not claims_chains(r, table):
            continue  # an rsqrt or a neg outside a transformer (a weight standardisation) is no LLM block
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


def last_logits(analysis: Analysis) -> Suggestion | None:
    """Inference steps that project every position to the vocabulary and read the last one
    (patterns.full_logits): the projection's and the whole-logits ops' kernel time × (1 − 1/S)."""
    if any(getattr(r.patterns, "training", False) for r in analysis.ranks):
        return None
    scope = Scope.of(analysis)
    rows, total = [], 0.0
    for r, table in rank_tables(analysis, "full_logits"):
        t = table[in_headline(r, table[fl.FL_STEP].to_numpy())]
        for shape, g in t.groupby(fl.FL_SHAPE, sort=False):
            s = int(g[fl.FL_POSITIONS].iat[0])
            gemm_us, other_us = float(g[fl.FL_GEMM_US].sum()), float(g[fl.FL_OTHER_US].sum())
            saving = (gemm_us + other_us) * (1.0 - 1.0 / s)
            total += saving
            rows.append({"rank": r.rank, "logits": shape, "positions": s,
                         "projection_us_per_step": gemm_us / scope.steps, "other_us_per_step": other_us / scope.steps,
                         "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    top = rows[0]
    formula = (f"the vocabulary projection's kernels ({fmt_us(float(str(top['projection_us_per_step'])))} per step) and "
               f"the kernels of the ops on the whole logits ({fmt_us(float(str(top['other_us_per_step'])))} per step) "
               f"× (1 − 1/{top['positions']}) = {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    title = (f"Compute the logits of the last position only (logits_to_keep=1): each step projects all "
             f"{top['positions']} positions to the vocabulary ({top['logits']}) and reads position −1")
    return suggestion("last_logits", title, saving, scope, formula, rows)


def last_logits_transform(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The whole-logits kernels (patterns.in_full_logits) × 1/S, S their positions."""
    p = r.patterns
    if p is None or len(p.in_full_logits) != len(r.classification.table) or not p.in_full_logits.any():
        return None
    return scale_rows(np.where(p.in_full_logits, 1.0 / p.full_logits_positions, 1.0))
