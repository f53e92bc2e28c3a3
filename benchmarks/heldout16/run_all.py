"""Times every workload of the sixteenth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout16/run_all.py [--budget S]
The same driver as the fifteenth set's (`benchmarks/heldout15/run_all.py`, imported, not copied):
phase 1 runs every (workload, variant) once as a plain subprocess (default 12 steps) and parses its
`mean step time` line, first each workload's baseline and labelled variant, then the extra
(unlabelled) variants, cheapest first, each only if it still leaves the expected time of every
recording (otherwise after the recordings, if time is left); phase 2 records, workload by workload,
the baseline and then its labelled variant (never the extra one), each as `python -m tracekit profile
--warmup 2 --active 4 --no-report --force -o $OUT/ho16_NAME[_VARIANT].trace.json.gz
benchmarks/heldout16/NAME.py [--variant V] --steps 8`, so that a budget cut leaves whole pairs: a
pair (or a plain run) starts only if it is expected to fit in what is left of --budget. The one
workload that compiles with inductor in its recorded rows (`flex_docmask_eager`) is recorded last.
After every run it writes $OUT/heldout16_runs.json and $OUT/heldout16_runs.md (default $OUT:
/tmp/out) and each run's output tail to $OUT/logs/.

Reused from the fifteenth set's driver: `env_for` (the child's environment), `run` (one subprocess,
its status, wall time and step time), `guess` (a run's expected seconds, from this set's tables) and
`markdown` (the results table, retitled). Only the tables below and the scheduling loop, which names
the set's files, are this set's own.
"""

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SET_NAME, TAG = "heldout16", "ho16"
_spec = importlib.util.spec_from_file_location("heldout15_run_all", HERE.parent / "heldout15" / "run_all.py")
assert _spec is not None and _spec.loader is not None
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

# script -> (its labelled variant, its extra variant or None), in README.md's order; the baseline
# (no --variant) is run first. Extra variants are timed in phase 1 only, never recorded.
WORKLOADS: dict[str, tuple[str, str | None]] = {
    "exprnn_uncached_orth": ("cached_weight", None),
    "flex_docmask_eager": ("compiled_flex", None),
    "fewshot_prefix_recompute": ("prefix_cache", None),
    "triton_rbf_ieee_dot": ("tf32x3", None),
    "catalog_score_gather": ("candidate_gather", "compiled"),
    "gcn_sparse_dense_graph": ("dense_adj", None),
    "ppo_python_envs": ("gpu_envs", None),
    "embed_unsorted_lengths": ("length_sorted", None),
    "fp8_kv_dequant_all": ("bf16_static_cache", None),
    "metatensor_unet_stream": ("plain_tensor", "cuda_graph"),
}
# phase 2's order: the inductor-compiled workload last
RECORD_ORDER = [n for n in WORKLOADS if n != "flex_docmask_eager"] + ["flex_docmask_eager"]
COMPILES = {"flex_docmask_eager"}  # its labelled variant's first plain run includes a cold inductor compile
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5. Extra variants have no recording.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("exprnn_uncached_orth", None): (7.5, 18.0),
    ("exprnn_uncached_orth", "cached_weight"): (7.5, 16.5),
    ("flex_docmask_eager", None): (10.5, 22.5),
    ("flex_docmask_eager", "compiled_flex"): (45.0, 27.0),
    ("fewshot_prefix_recompute", None): (9.0, 19.5),
    ("fewshot_prefix_recompute", "prefix_cache"): (7.5, 18.0),
    ("triton_rbf_ieee_dot", None): (10.5, 21.0),
    ("triton_rbf_ieee_dot", "tf32x3"): (9.0, 19.5),
    ("catalog_score_gather", None): (7.5, 18.0),
    ("catalog_score_gather", "candidate_gather"): (7.5, 16.5),
    ("catalog_score_gather", "compiled"): (60.0, 0.0),
    ("gcn_sparse_dense_graph", None): (7.5, 18.0),
    ("gcn_sparse_dense_graph", "dense_adj"): (7.5, 16.5),
    ("ppo_python_envs", None): (7.5, 19.5),
    ("ppo_python_envs", "gpu_envs"): (7.5, 18.0),
    ("embed_unsorted_lengths", None): (9.0, 21.0),
    ("embed_unsorted_lengths", "length_sorted"): (7.5, 18.0),
    ("fp8_kv_dequant_all", None): (9.0, 21.0),
    ("fp8_kv_dequant_all", "bf16_static_cache"): (9.0, 19.5),
    ("metatensor_unet_stream", None): (7.5, 18.0),
    ("metatensor_unet_stream", "plain_tensor"): (7.5, 16.5),
    ("metatensor_unet_stream", "cuda_graph"): (7.5, 0.0),
}
# the fifteenth set's `guess` reads these two tables from its own module
_base.EXPECTS, _base.COMPILES = EXPECTS, COMPILES
env_for, run, guess = _base.env_for, _base.run, _base.guess


def markdown(doc: dict[str, Any]) -> str:
    """The fifteenth set's table, under this set's title."""
    return _base.markdown(doc).replace("# Fifteenth held-out set", "# Sixteenth held-out set", 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=500.0, help="seconds for all runs (default 500)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds at most for one run (default 120)")
    p.add_argument("--only", nargs="*", choices=list(WORKLOADS), default=list(WORKLOADS), help="workloads (default: all)")
    args = p.parse_args()
    out = Path(os.environ.get("OUT", "/tmp/out"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in args.only}
    skipped: list[str] = []
    recorded = [n for n in RECORD_ORDER if n in args.only]
    # phase 1: plain runs of each baseline and labelled variant, then the extra variants (cheapest
    # first); phase 2: one group per workload, its baseline recording then its labelled variant's;
    # then the extra variants that did not fit before the recordings
    groups: list[list[tuple[str, str, str | None]]] = [[("plain", n, v)] for n in args.only for v in (None, WORKLOADS[n][0])]
    extras = sorted(((n, WORKLOADS[n][1]) for n in args.only if WORKLOADS[n][1]), key=lambda nv: EXPECTS[nv][0])
    groups += [[("extra", n, v)] for n, v in extras]
    groups += [[("profile", n, v) for v in (None, WORKLOADS[n][0])] for n in recorded]

    def plain_wall(name: str, variant: str | None) -> float:
        return float(runs[name].get(variant or "baseline", {}).get("plain", {}).get("wall_s", 0.0))

    def save() -> None:
        doc = {"budget_s": args.budget, "elapsed_s": round(time.perf_counter() - start, 1), "skipped": skipped,
               "python": sys.version.split()[0], "runs": runs}
        (out / f"{SET_NAME}_runs.json").write_text(json.dumps(doc, indent=1))
        (out / f"{SET_NAME}_runs.md").write_text(markdown(doc))

    def reserve() -> float:
        """The expected seconds of the recordings not yet run."""
        return sum(guess("profile", n, v, plain_wall(n, v))
                   for n in recorded for v in (None, WORKLOADS[n][0]) if "profile" not in runs[n].get(v or "baseline", {}))

    pending = list(groups)
    while pending:
        group = pending.pop(0)
        phase0 = group[0][0]
        need = sum(guess("profile" if ph == "profile" else "plain", n, v, plain_wall(n, v)) for ph, n, v in group)
        left = args.budget - (time.perf_counter() - start)
        if phase0 == "extra" and need + reserve() > left:
            print(f"defer extra {group[0][1]} {group[0][2]}: needs {need:.0f} s and the recordings "
                  f"{reserve():.0f} s, {left:.0f} s left", flush=True)
            pending.append([("late", n, v) for _, n, v in group])  # after the recordings
            continue
        if need > left:
            for ph, n, v in group:
                skipped.append(f"{ph}: {n} {v or 'baseline'} (its group expects {need:.0f} s, {left:.0f} s left)")
                print(f"skip {ph} {n} {v or 'baseline'}: group expects {need:.0f} s, {left:.0f} s left", flush=True)
            save()
            continue
        for phase, name, variant in group:
            key = variant or "baseline"
            entry = runs[name].setdefault(key, {})
            if phase in ("extra", "late"):
                entry["extra"] = True
            left = args.budget - (time.perf_counter() - start)
            script = str(HERE / f"{name}.py")
            vargs = ["--variant", variant] if variant else []
            tag = f"{TAG}_{name}" + (f"_{variant}" if variant else "")
            if phase == "profile":
                cmd = [sys.executable, "-m", "tracekit", "profile", "--warmup", "2", "--active", "4", "--no-report", "--force",
                       "-o", str(out / f"{tag}.trace.json.gz"), script, *vargs, "--steps", "8"]
            else:
                cmd = [sys.executable, script, *vargs]
            slot = "profile" if phase == "profile" else "plain"
            entry[slot] = r = run(cmd, env_for(name, variant), min(args.timeout, max(left, 1.0)),
                                  out / "logs" / f"{tag}.{slot}.log")
            print(f"{phase:7s} {name:24s} {key:18s} {str(r['status'])[:60]:60s} wall {r['wall_s']:6.1f} s "
                  f"step {r.get('step_ms', float('nan')):9.3f} ms", flush=True)
            save()
    save()
    print((out / f"{SET_NAME}_runs.md").read_text())


if __name__ == "__main__":
    main()
