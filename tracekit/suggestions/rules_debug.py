"""Rules about work a step does for debugging or tidiness: autograd anomaly mode, synchronous kernel launches, per-step empty_cache() and gc.collect()."""

from __future__ import annotations

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import anomaly, cleanup
from tracekit.analyzers.detectors import launch_blocking as lb
from tracekit.suggestions.common import Scope, fmt_us, in_headline, rank_tables, suggestion
from tracekit.suggestions.model import Suggestion

RECUR_SHARE = 0.5  # a release or collection must recur in this share of the headline steps (not a one-off)


def _recurs(steps_with: int, steady: int) -> bool:
    return steps_with >= max(RECUR_SHARE * steady, 1)


def anomaly_mode(analysis: Analysis) -> Suggestion | None:
    """Autograd anomaly detection on (patterns.anomaly): per step, the backward NaN checks' wall time
    (isnan → item, with their kernels, copies and syncs) + the forward's stack capture (backward
    nodes × one node's capture, from the view ops' self time)."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total, settings = 0.0, set()
    for r, table in rank_tables(analysis, "anomaly"):
        settings |= {anomaly.DEBUG_SETTINGS[k] for k, on in (r.patterns.debug_modes if r.patterns else ()) if on}
        t = table[in_headline(r, table[anomaly.AN_STEP].to_numpy())]
        for e in t.to_dict("records"):
            saving = float(e[anomaly.AN_CHECK_US]) + float(e[anomaly.AN_CAPTURE_US])
            total += saving
            rows.append({"rank": r.rank, "step": int(e[anomaly.AN_STEP]), "nan_checks": int(e[anomaly.AN_CHECKS]),
                         "check_us": float(e[anomaly.AN_CHECK_US]), "backward_nodes": int(e[anomaly.AN_NODES]),
                         "capture_per_node_us": float(e[anomaly.AN_CAPTURE_NODE_US]),
                         "stack_capture_us": float(e[anomaly.AN_CAPTURE_US]),
                         "forward_host_us": float(e[anomaly.AN_FORWARD_HOST_US]), "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    checks = sum(float(str(x["nan_checks"])) for x in rows) / (scope.steps * scope.ranks)
    formula = ("Σ per step of the backward NaN checks' wall time (aten::isnan → aten::_is_any_true → aten::item "
               "inside each autograd node: a kernel, a device-to-host copy and a sync each) + backward nodes × "
               "the stack one forward node stores (median self time of the forward's view ops − the backward's) "
               f"= {fmt_us(saving)}")
    if settings:
        formula += f"; on in the run, as tracekit profile recorded: {'; '.join(sorted(settings))}"
    if round(checks):
        title = (f"Turn off autograd anomaly detection: {checks:.0f} NaN check{'' if round(checks) == 1 else 's'} "
                 "per step (a host sync each) and a Python stack stored for every forward op")
    else:  # check_nan=False (the recorder says anomaly mode was on): the stack capture alone
        nodes = sum(int(str(x["backward_nodes"])) for x in rows) / (scope.steps * scope.ranks)
        title = (f"Turn off autograd anomaly detection: a Python stack stored for each of {nodes:.0f} forward "
                 "autograd nodes per step")
    return suggestion("anomaly_mode", title, saving, scope, formula, rows)


def launch_blocking(analysis: Analysis) -> Suggestion | None:
    """Synchronous kernel launches (patterns.launch_blocking, CUDA_LAUNCH_BLOCKING=1): per step, the
    host time the launches spent past a normal launch, at most what the GPU's own kernel time leaves
    of the step (the host and the GPU overlap again, the step no shorter than its kernels). Read from
    the trace alone; the setting tracekit profile recorded only names the cause."""
    scope = Scope.of(analysis)
    rows: list[dict[str, object]] = []
    total, recorded = 0.0, set()
    span = scope.span_us / scope.steps  # the traced step (per rank)
    for r, table in rank_tables(analysis, "launch_blocking"):
        modes = dict(r.patterns.debug_modes) if r.patterns is not None else {}
        if "cuda_launch_blocking" in modes:
            recorded.add(bool(modes["cuda_launch_blocking"]))
        t = table[in_headline(r, table[lb.LB_STEP].to_numpy())]
        for e in t.to_dict("records"):
            wait, kernels = float(e[lb.LB_WAIT_US]), float(e[lb.LB_KERNEL_US])
            saving = min(wait, max(span - kernels, 0.0))
            total += saving
            telling = int(e[lb.LB_TELLING])
            rows.append({"rank": r.rank, "step": int(e[lb.LB_STEP]), "launches": int(e[lb.LB_LAUNCHES]),
                         "telling_launches": telling, "ending_after_kernel": int(e[lb.LB_BLOCKED]),
                         "share_after_kernel": float(e[lb.LB_BLOCKED]) / telling if telling else 0.0,
                         "blocked_host_us": wait, "kernel_us": kernels,
                         "normal_launch_us": float(e[lb.LB_LAUNCH_US]), "saving_us": saving})
    if not rows:
        return None
    saving = total / scope.ranks
    n = scope.steps * scope.ranks
    launches = sum(int(str(x["launches"])) for x in rows) / n
    telling = sum(int(str(x["telling_launches"])) for x in rows)
    after = sum(int(str(x["ending_after_kernel"])) for x in rows)
    share = 100.0 * after / telling if telling else 0.0
    wait = sum(float(str(x["blocked_host_us"])) for x in rows) / n
    formula = (f"Σ per step of min(the kernel launch calls' time past a normal launch ({fmt_us(float(str(rows[0]['normal_launch_us'])))}: "
               "the rank's launches that returned before their kernel, else the H200 samples' median), the step − "
               f"those launches' kernel time) = {fmt_us(saving)}: {after} of {telling} launches whose kernel is long "
               "enough to tell return after it ends")
    if True in recorded:
        formula += "; tracekit profile recorded CUDA_LAUNCH_BLOCKING=1 in the run's environment"
    elif False in recorded:
        formula += ("; tracekit profile recorded no CUDA_LAUNCH_BLOCKING: another setting or tool made the "
                    "launches synchronous (a debugger, compute-sanitizer, a launcher's environment)")
    title = (f"Unset CUDA_LAUNCH_BLOCKING: {share:.0f} % of the kernel launches wait for their kernel to end "
             f"({launches:.0f} launches per step, {fmt_us(wait)} of host time blocked per step), so the CPU and "
             "the GPU take turns")
    return suggestion("launch_blocking", title, saving, scope, formula, rows)


def empty_cache(analysis: Analysis) -> Suggestion | None:
    """The CUDA cache released every step (patterns.cleanup): per step, the cudaFree and cudaMalloc
    calls' time, and, in a trace that does not record garbage collections, the silence on the thread
    right before each release (the Python before `empty_cache()`: where `gc.collect()` usually runs)."""
    scope = Scope.of(analysis)
    rows, total, silent_total = [], 0.0, 0.0
    for r, table in rank_tables(analysis, "cleanup"):
        t = table[in_headline(r, table[cleanup.CL_STEP].to_numpy())]
        t = t[t[cleanup.CL_RELEASES] > 0]
        if not _recurs(len(t), len(r.launch.steady_steps)):
            continue
        recorded = r.patterns is not None and r.patterns.gc_recorded
        for e in t.to_dict("records"):
            silent = 0.0 if recorded else float(e[cleanup.CL_SILENT_US])
            alloc = float(e[cleanup.CL_FREE_US]) + float(e[cleanup.CL_MALLOC_US])
            total += alloc + silent
            silent_total += silent
            rows.append({"rank": r.rank, "step": int(e[cleanup.CL_STEP]), "releases": int(e[cleanup.CL_RELEASES]),
                         "cudaFree": int(e[cleanup.CL_FREES]), "free_us": float(e[cleanup.CL_FREE_US]),
                         "cudaMalloc": int(e[cleanup.CL_MALLOCS]), "malloc_us": float(e[cleanup.CL_MALLOC_US]),
                         "untraced_before_us": silent, "saving_us": alloc + silent})
    if not rows:
        return None
    saving = total / scope.ranks
    n = scope.steps * scope.ranks
    frees = sum(int(x["cudaFree"]) for x in rows) / n
    mallocs = sum(int(x["cudaMalloc"]) for x in rows) / n
    formula = (f"Σ per step of the cudaFree calls outside any op (the release) and the cudaMalloc calls (the "
               f"cache growing back) = {fmt_us(saving - silent_total / scope.ranks)}")
    title = (f"Stop emptying the CUDA cache every step: {frees:.0f} cudaFree and {mallocs:.0f} cudaMalloc per step")
    if silent_total > 0:
        formula += (f", + the silence on the thread right before each release ({fmt_us(silent_total / scope.ranks)}: "
                    "no op, runtime call or annotation recorded; this trace does not record garbage collections, "
                    "so what ran there is unknown: in the usual gc.collect(); torch.cuda.empty_cache() pair, "
                    "the collection)")
        title += (f", after {fmt_us(silent_total / n)} with nothing recorded on the thread "
                  "(the gc.collect() or other Python before empty_cache())")
    return suggestion("empty_cache", title, saving, scope, formula, rows)


def gc_collect(analysis: Analysis) -> Suggestion | None:
    """Python garbage collections recorded by `tracekit profile` (patterns.cleanup): per step, their
    pauses. Silent on traces that do not record collections (no evidence of them there)."""
    scope = Scope.of(analysis)
    rows, total, explicit, full = [], 0.0, 0, 0
    for r, table in rank_tables(analysis, "cleanup"):
        if r.patterns is None or not r.patterns.gc_recorded:
            continue
        t = table[in_headline(r, table[cleanup.CL_STEP].to_numpy())]
        t = t[t[cleanup.CL_GC] > 0]
        for e in t.to_dict("records"):
            total += float(e[cleanup.CL_GC_US])
            explicit += int(e[cleanup.CL_GC_EXPLICIT])
            full += int(e[cleanup.CL_GC_FULL])
            rows.append({"rank": r.rank, "step": int(e[cleanup.CL_STEP]), "collections": int(e[cleanup.CL_GC]),
                         "gc_collect_calls": int(e[cleanup.CL_GC_EXPLICIT]), "generation_2": int(e[cleanup.CL_GC_FULL]),
                         "pause_us": float(e[cleanup.CL_GC_US]), "saving_us": float(e[cleanup.CL_GC_US])})
    if not rows:
        return None
    saving = total / scope.ranks
    n = scope.steps * scope.ranks
    formula = ("Σ per step of the garbage-collection pauses tracekit profile recorded (gc.callbacks, start to "
               f"stop) = {fmt_us(saving)}: the thread does nothing else during a collection")
    if explicit:
        calls = f"{explicit / n:.0f}" if explicit % n == 0 else f"{explicit / n:.1f}"
        title = (f"Remove the per-step gc.collect(): {calls} call{'s' if explicit != n else ''} per step "
                 f"pause Python for {fmt_us(saving / scope.steps)}")
    else:
        title = (f"Python's garbage collector pauses {fmt_us(saving / scope.steps)} per step ({full / n:.1f} full "
                 "collections): gc.freeze() after setup, or raise gc.set_threshold")
    return suggestion("gc_collect", title, saving, scope, formula, rows)
