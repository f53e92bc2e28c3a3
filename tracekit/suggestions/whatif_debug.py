"""What-if transforms of the rules that take a stretch of host work out of the step: anomaly mode off, no synchronous launches, no per-step empty_cache() or gc.collect(), no recompiles."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from tracekit.analyzers.analysis import RankAnalysis
from tracekit.analyzers.detectors import anomaly, cleanup, recompiles
from tracekit.model.outlook import StepModel, Transform
from tracekit.model.replay import ReplayCosts
from tracekit.model.whatif import Breaks, compose, merge_breaks, shorter_gaps
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.whatif_evidence import BARE_LAUNCH_US, rank_evidence


def _shorter_tail(breaks: Breaks) -> Transform:
    """The main thread's tail (its last call's end to the step mark's end) shorter by the share of it
    inside the stretches, when they are on the main thread: a gc.collect() after the step's last launch."""

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        i = g.main_last_call
        if i < 0 or not np.isfinite(g.cpu_end_us) or not bool(breaks.on_thread[g.call_row[i]]):
            return step.costs
        lo, hi = float(g.call_ts_us[i] + g.call_dur_us[i]), float(g.cpu_end_us)
        covered = float(np.clip(np.minimum(breaks.ends, hi) - np.maximum(breaks.starts, lo), 0.0, None).sum())
        if hi <= lo or covered <= 0:
            return step.costs
        tail = step.costs.tail_us if step.costs.tail_us is not None else g.tail_us
        return dataclasses.replace(step.costs, tail_us=tail * (1.0 - min(covered / (hi - lo), 1.0)))

    return apply


def _removed(r: RankAnalysis, spans: pd.DataFrame, tid_col: str, ts_col: str, end_col: str) -> list[Transform]:
    """Per thread, the stretches [ts, end) of `spans` removed from it: from the host gaps and calls
    they cover (merge_breaks) and from the main thread's tail."""
    tids = r.patterns.runtime_tids if r.patterns is not None else np.zeros(0)
    out: list[Transform] = []
    for tid, g in spans.groupby(tid_col, sort=True):
        on_thread = tids == tid
        if on_thread.any():
            breaks = Breaks(on_thread, g[ts_col].to_numpy(dtype=float), g[end_col].to_numpy(dtype=float))
            out.extend((merge_breaks(breaks), _shorter_tail(breaks)))
    return out


def anomaly_off(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The backward NaN checks removed (their stretches: calls, syncs and host time), and the forward
    calls' host gaps shorter by the stack capture's share of the forward ops' self time."""
    p = r.patterns
    if p is None or not len(p.anomaly):
        return None
    parts = _removed(r, p.anomaly_checks, anomaly.AC_TID, anomaly.AC_TS, anomaly.AC_END)
    host = float(p.anomaly[anomaly.AN_FORWARD_HOST_US].sum())
    share = float(p.anomaly[anomaly.AN_CAPTURE_US].sum()) / host if host > 0 else 0.0
    if share > 0 and len(p.forward_calls):
        parts.append(shorter_gaps(p.forward_calls, share))
    return compose(parts) if parts else None


def unblocked_launches(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The synchronous kernel launches (StepGraph.call_blocking) return after an unprofiled launch
    (BARE_LAUNCH_US: the projection takes any profiled launch of the rank down to that floor) and
    wait for nothing: the GPU runs behind the host again."""
    p = r.patterns
    if p is None or not len(p.launch_blocking):
        return None

    def apply(step: StepModel) -> ReplayCosts:
        g = step.graph
        if not g.call_blocking.any():
            return step.costs
        dur = step.costs.call_dur_us if step.costs.call_dur_us is not None else g.call_dur_us
        nowait = g.call_blocking if step.costs.call_nowait is None else step.costs.call_nowait | g.call_blocking
        return dataclasses.replace(step.costs, call_dur_us=np.where(g.call_blocking, BARE_LAUNCH_US, dur),
                                   call_nowait=nowait)

    return apply


def _cleanup(r: RankAnalysis, kinds: tuple[str, ...]) -> Transform | None:
    p = r.patterns
    if p is None or not len(p.cleanup_spans):
        return None
    spans = p.cleanup_spans[p.cleanup_spans[cleanup.CS_WHAT].isin(kinds)]
    parts = _removed(r, spans, cleanup.CS_TID, cleanup.CS_TS, cleanup.CS_END)
    return compose(parts) if parts else None


def no_empty_cache(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The release's cudaFree and the next step's cudaMalloc calls cost nothing; without recorded
    collections, the silence before each release goes too (what the rule's saving counted)."""
    p = r.patterns
    silent = () if p is not None and p.gc_recorded else (cleanup.SPAN_SILENT,)
    return _cleanup(r, (cleanup.SPAN_ALLOC, *silent))


def no_gc(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The recorded collections' pauses removed from the host gaps they lie in."""
    return _cleanup(r, (cleanup.SPAN_GC,))


def no_recompiles(s: Suggestion, r: RankAnalysis, per_step: float) -> Transform | None:
    """The frame compiles inside the steps removed from the host gaps and calls they cover; where the
    frame runs eagerly after Dynamo gave up on it (evidence mode "eager_fallback"), the steps as
    compiled: fuse_elementwise's change."""
    p = r.patterns
    if any(e.get("mode") == "eager_fallback" for e in rank_evidence(s, r)):
        from tracekit.suggestions.whatif import (
            TRANSFORMS as ALL,  # here: whatif imports this module
        )
        return ALL["fuse_elementwise"](s, r, per_step)
    if p is None or not len(p.recompiles):
        return None
    parts = _removed(r, p.recompiles, recompiles.RC_TID, recompiles.RC_TS, recompiles.RC_END)
    return compose(parts) if parts else None


TRANSFORMS = {"anomaly_mode": anomaly_off, "launch_blocking": unblocked_launches, "empty_cache": no_empty_cache, "gc_collect": no_gc,
              "recompiles": no_recompiles}
