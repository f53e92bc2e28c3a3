"""Rule about an optimizer offloaded to the host: its step on the CPU, the gradients copied down and the weights copied up every step, while the model runs on the GPU."""

from __future__ import annotations

import dataclasses
from typing import Any

from tracekit.analyzers.analysis import Analysis, RankAnalysis
from tracekit.analyzers.detectors import offload as of
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    fmt_bytes,
    fmt_us,
    in_headline,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_optimizer import ADAM_WORDS
from tracekit.suggestions.snippets import OPTIMIZER_ON_GPU_DEEPSPEED
from tracekit.units import plural

# A fused AdamW on the GPU moves, per fp32 parameter, its compulsory traffic once: it reads the param,
# the grad, exp_avg and exp_avg_sq (4 × 4 B) and writes the param, exp_avg and exp_avg_sq (3 × 4 B):
# ADAM_WORDS (7) × 4 B = 28 B per parameter, at the device's memory bandwidth.
FUSED_BYTES_PER_PARAM = ADAM_WORDS * 4
# What fp32 Adam keeps per parameter and offloading keeps off the GPU: the fp32 master weight, its
# fp32 gradient, exp_avg and exp_avg_sq, 4 × 4 B.
STATE_BYTES_PER_PARAM = 16
FALLBACK_BANDWIDTH = 1e12  # B/s for a device not in the table: below every data-centre GPU's (conservative)
HOST_STEP_SHARE = 0.5  # the host step must recur in this share of the headline steps (not a one-off)
DEEPSPEED = "DeepSpeed"  # DeepSpeedCPUAdam (ZeRO-Offload's optimizer): its config, not the code, moves it


def _fits(r: RankAnalysis, state: float) -> tuple[bool | None, str]:
    """Whether `state` bytes more fit in the device memory the rank left free at its peak (memory
    view of a profile_memory trace); None: not known."""
    headroom = r.memory.headroom if r.memory is not None else None
    if headroom is None:
        return None, "GPU memory not recorded; profile_memory=True records it"
    return state <= headroom, f"{fmt_bytes(max(headroom, 0.0))} free on the GPU at the peak"


def optimizer_on_gpu(analysis: Analysis) -> Suggestion | None:
    """Optimizer steps run on the host while the model runs on the GPU (detectors/offload.py): per
    step, the host step's time + its copy calls (launches and their syncs) − a fused AdamW's time on
    the GPU (the parameters × 28 B / memory bandwidth). Silent where the recorded memory shows the
    state (parameters × 16 B) would not fit: then GPU memory is the reason for offloading."""
    scope = Scope.of(analysis)
    bandwidth = analysis.device.memory_bandwidth if analysis.device is not None else FALLBACK_BANDWIDTH
    rows: list[dict[str, Any]] = []
    total, names, fit_words, fits_all = 0.0, set(), "", True
    for r in analysis.ranks:
        t = r.patterns.offload if r.patterns is not None else None
        if t is None or not len(t):
            continue
        t = t[in_headline(r, t[of.OF_STEP].to_numpy())]
        if not len(t) or t[of.OF_STEP].nunique() < HOST_STEP_SHARE * len(r.launch.steady_steps):
            continue
        spans = {p.step: tot.span_us for p, tot in zip(r.launch.phases, r.launch.step_totals, strict=True)}
        for row in t.to_dict("records"):
            span = spans.get(row[of.OF_STEP], 0.0)
            if span > 0 and row[of.OF_HOST_US] < SILENT_BELOW_PCT / 100 * span:
                continue  # the host step itself is under 2 % of the step
            params = float(row[of.OF_PARAMS])
            state = params * STATE_BYTES_PER_PARAM
            fits, fit_words = _fits(r, state)
            if fits is False:
                continue  # the state would not fit: memory is why it is offloaded
            fits_all = fits_all and fits is True
            fused = params * FUSED_BYTES_PER_PARAM / bandwidth * 1e6
            now = row[of.OF_HOST_US] + row[of.OF_CALL_US]
            saving = max(min(now, span) - fused, 0.0) if span > 0 else max(now - fused, 0.0)
            total += saving
            names.add(str(row[of.OF_OPTIMIZER]))
            copies = row[of.OF_D2H] + row[of.OF_H2D]
            rows.append({"rank": r.rank, "step": int(row[of.OF_STEP]), "op": row[of.OF_OP],
                         "host_us": row[of.OF_HOST_US], "kernels": int(row[of.OF_KERNELS]),
                         "d2h_copies": int(row[of.OF_D2H]), "d2h_bytes": row[of.OF_D2H_BYTES],
                         "h2d_copies": int(row[of.OF_H2D]), "h2d_bytes": row[of.OF_H2D_BYTES],
                         "size_matched": int(row[of.OF_MATCHED]), "pageable": int(row[of.OF_PAGEABLE]),
                         "pinned": int(copies - row[of.OF_PAGEABLE]), "copy_us": row[of.OF_COPY_US],
                         "call_us": row[of.OF_CALL_US], "params": params, "state_bytes": state,
                         "fused_us": fused, "saving_us": saving})
    if not rows:
        return None
    last = rows[-1]
    pageable = "pageable" if last["pageable"] >= last["pinned"] else "pinned"
    formula = (f"per step, the host step ({fmt_us(last['host_us'])}, {last['kernels']} kernels) + its copy calls and "
               f"their syncs ({fmt_us(last['call_us'])}: {plural(last['d2h_copies'], 'gradient copy', 'gradient copies')} "
               f"down, {fmt_bytes(last['d2h_bytes'])}, {plural(last['h2d_copies'], 'weight copy', 'weight copies')} up, "
               f"{fmt_bytes(last['h2d_bytes'])}, mostly {pageable}) − a fused AdamW on the GPU ({last['params']:,.0f} "
               f"parameters × {FUSED_BYTES_PER_PARAM} B / {bandwidth / 1e12:.2f} TB/s = {fmt_us(last['fused_us'])}) "
               f"(last step shown); summed over {plural(len(rows), 'step')} = {fmt_us(total / scope.ranks)}")
    state_words = f"{fmt_bytes(last['state_bytes'])} of fp32 Adam state ({last['params']:,.0f} parameters × {STATE_BYTES_PER_PARAM} B)"
    keep = "" if fits_all else f"; keep it offloaded only if the model + {state_words} does not fit ({fit_words})"
    name = "/".join(sorted(names))
    change = ("Keep the optimizer on the GPU (ZeRO offload_optimizer device \"none\")" if DEEPSPEED in name
              else "Run the optimizer on the GPU (AdamW(fused=True) on the model's parameters)")
    title = (f"{change}: {name}.step runs on "
             f"the host ({fmt_us(last['host_us'])}, {plural(last['kernels'], 'kernel')}) between "
             f"{plural(last['d2h_copies'] + last['h2d_copies'], 'gradient/weight copy', 'gradient/weight copies')} "
             f"every step while the GPU idles{keep}")
    if fits_all:
        formula += f"; {state_words} fits: {fit_words}"
    found = suggestion("optimizer_on_gpu", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)
    if found is None or not any(n.startswith(DEEPSPEED) for n in names):
        return found
    return dataclasses.replace(found, snippet=OPTIMIZER_ON_GPU_DEEPSPEED)
