"""Rules about training-time machinery left on at inference: quantizers still calibrating, weight normalisation recomputed in every call, autograd recording graphs no backward reads."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import calibration as cb
from tracekit.analyzers.detectors import grad_recording as gr
from tracekit.analyzers.detectors import weight_norm as wn
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    every_step_tables,
    fmt_us,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_host import calls_gone


def calibration_off(analysis: Analysis) -> Suggestion | None:
    """Quantizers still calibrating in a model that runs its quantized ops (patterns.calibration), in
    every headline step: each calibrator's host span from its first op's start to its last op's end
    (its range reads' waits included). The what-if removes the calibrators' calls with the host gaps
    before them. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "calibration", cb.CB_STEP):
        host = float(t[cb.CB_HOST_US].sum())
        total += host
        rows.append({"rank": r.rank, "calibrators_per_step": float(t[cb.CB_CALIBRATORS].sum()) / n,
                     "calibrator": str(t[cb.CB_OPS].iat[0]), "calls_per_step": float(t[cb.CB_CALLS].sum()) / n,
                     "syncs_per_step": float(t[cb.CB_SYNCS].sum()) / n,
                     "gpu_us_per_step": float(t[cb.CB_GPU_US].sum()) / n, "host_us_per_step": host / n,
                     "saving_us": host})
    if not rows:
        return None
    x = rows[0]
    title = (f"Switch the quantizers' calibration off: {round(float(str(x['calibrators_per_step'])))} histograms "
             f"per step ({x['calibrator']}) in a model that already runs its quantized ops, nothing reads them, "
             f"{fmt_us(float(str(x['host_us_per_step'])))} of host time per step "
             "(pytorch-quantization / ModelOpt: disable_calib(); torch.ao: disable_observer)")
    formula = ("Σ per calibrator of its host span, from its first op's start (the range of its input) to the end "
               "of its last (the histogram added in), the host reads' waits included, per step")
    return suggestion("calibration_off", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


calibration_transform = calls_gone("calibration_calls")  # every calibrator's calls


def remove_weight_norm(analysis: Analysis) -> Suggestion | None:
    """Weights recomputed by weight normalisation in inference steps (patterns.weight_norm), in every
    headline step: the recomputations' op time. The what-if removes their calls with the host gaps
    before them (the parametrization's Python). Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "weight_norm", wn.WN_STEP):
        host = float(t[wn.WN_HOST_US].sum())
        total += host
        rows.append({"rank": r.rank, "weights_per_step": float(t[wn.WN_NORMS].sum()) / n,
                     "calls_per_step": float(t[wn.WN_CALLS].sum()) / n, "gpu_us_per_step": float(t[wn.WN_GPU_US].sum()) / n,
                     "host_us_per_step": host / n, "saving_us": host})
    if not rows:
        return None
    x = rows[0]
    title = (f"Remove the weight normalisation for inference: {round(float(str(x['weights_per_step'])))} weights "
             "recomputed as g·v/‖v‖ per step, the same every time, "
             f"{fmt_us(float(str(x['host_us_per_step'])))} of host time per step "
             "(torch.nn.utils.parametrize.remove_parametrizations(module, 'weight') on each, as vocoders' remove_weight_norm() does)")
    formula = "Σ of the weight-normalisation ops' host time (torch._weight_norm calls), per step"
    return suggestion("remove_weight_norm", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


weight_norm_transform = calls_gone("weight_norm_calls")  # the recomputations' calls


def inference_mode(analysis: Analysis) -> Suggestion | None:
    """Autograd graphs recorded in inference steps (patterns.grad_recording), in every headline step:
    the nodes created × grad_recording.NODE_US, each up to the host gap before the next runtime call.
    The what-if shortens those gaps by as much. Silent below SILENT_BELOW_PCT."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total = 0.0
    for r, t, n in every_step_tables(analysis, "grad_recording", gr.GR_STEP):
        host = float(t[gr.GR_HOST_US].sum())
        total += host
        rows.append({"rank": r.rank, "autograd_nodes_per_step": float(t[gr.GR_NODES].sum()) / n,
                     "ops_recorded_per_step": float(t[gr.GR_OPS].sum()) / n, "host_us_per_step": host / n,
                     "saving_us": host})
    if not rows:
        return None
    x = rows[0]
    title = (f"Run inference under torch.inference_mode(): {round(float(str(x['autograd_nodes_per_step'])))} autograd "
             "graph nodes are recorded per step in steps that never run backward (weights that require grad, no "
             f"no_grad), {fmt_us(float(str(x['host_us_per_step'])))} of host time per step; in inference mode "
             "nn.TransformerEncoderLayer and nn.MultiheadAttention also take their fused fast path")
    formula = (f"Σ per runtime call of min(the host gap before it, {fmt_us(gr.NODE_US)} × the autograd nodes created "
               "since the thread's previous call), per step (nodes: the rise of the ops' recorded sequence numbers)")
    return suggestion("inference_mode", title, total / scope.ranks, scope, formula, rows, min_pct=SILENT_BELOW_PCT)
