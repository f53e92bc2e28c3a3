"""Times every workload of the thirteenth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout13/run_all.py [--budget S]
Phase 1 runs every (workload, variant) once as a plain subprocess (default 12 steps) and parses its
`mean step time` line; phase 2 records, workload by workload, the baseline and then its variant,
each as `python -m tracekit profile --warmup 2 --active 4 --no-report --force -o $OUT/ho13_NAME[_VARIANT].trace.json.gz
benchmarks/heldout13/NAME.py [--variant V] --steps 8` (the profile rows of README.md), so that a
budget cut leaves whole pairs: a pair is started only if both of its recordings are expected to fit
in what is left of --budget (a plain run likewise). `ast_debug_log` goes first so that inductor's
and Triton's on-disk caches are warm for its recordings. After every run it writes
$OUT/heldout13_runs.json and $OUT/heldout13_runs.md (default $OUT: /tmp/out) and each run's output
tail to $OUT/logs/.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# script -> its variant (the baseline, no --variant, first), as in README.md's table
WORKLOADS: dict[str, tuple[str, ...]] = {
    "ast_debug_log": ("log_flag",),
    "nbeats_clip_loop": ("clip_grad_norm",),
    "dna_padding_mask": ("no_mask",),
    "triton_qknorm_rows": ("row_tiles",),
    "eva_swiglu_2730": ("pad_hidden",),
    "vae_decode_fp32": ("bf16",),
    "seg_numpy_confmat": ("gpu_confmat",),
    "clip_frame_loop": ("batched_frames",),
    "fp8_fake_quant": ("scaled_mm",),
    "mamba_eager_decode": ("cuda_graph",),
}
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run); README.md's "Device time" table. The two inductor compiles of `ast_debug_log` are
# cold in phase 1 and read inductor's and Triton's on-disk caches in its recordings.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("ast_debug_log", None): (16.0, 17.0),
    ("ast_debug_log", "log_flag"): (18.0, 16.0),
    ("nbeats_clip_loop", None): (5.0, 13.0),
    ("nbeats_clip_loop", "clip_grad_norm"): (5.0, 12.0),
    ("dna_padding_mask", None): (5.0, 12.0),
    ("dna_padding_mask", "no_mask"): (5.0, 12.0),
    ("triton_qknorm_rows", None): (6.0, 13.0),
    ("triton_qknorm_rows", "row_tiles"): (6.0, 13.0),
    ("eva_swiglu_2730", None): (5.0, 12.0),
    ("eva_swiglu_2730", "pad_hidden"): (5.0, 12.0),
    ("vae_decode_fp32", None): (5.0, 12.0),
    ("vae_decode_fp32", "bf16"): (5.0, 11.0),
    ("seg_numpy_confmat", None): (5.0, 12.0),
    ("seg_numpy_confmat", "gpu_confmat"): (5.0, 11.0),
    ("clip_frame_loop", None): (5.0, 13.0),
    ("clip_frame_loop", "batched_frames"): (5.0, 11.0),
    ("fp8_fake_quant", None): (6.0, 13.0),
    ("fp8_fake_quant", "scaled_mm"): (6.0, 13.0),
    ("mamba_eager_decode", None): (5.0, 13.0),
    ("mamba_eager_decode", "cuda_graph"): (5.0, 11.0),
}
STEP = re.compile(r"mean step time over steps \d+\.\.\d+: ([0-9.]+) ms")


def env_for(name: str, variant: str | None) -> dict[str, str]:
    """The child's environment: this one, without CUDA_LAUNCH_BLOCKING or TRITON_INTERPRET (a GPU run)."""
    return {k: v for k, v in os.environ.items() if k not in ("CUDA_LAUNCH_BLOCKING", "TRITON_INTERPRET")}


def run(cmd: list[str], env: dict[str, str], timeout: float, log: Path) -> dict[str, Any]:
    """One subprocess: status, wall time, the last printed mean step time; its output tail goes to `log`."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        log.write_text(f"$ {' '.join(cmd)}\ntimeout after {timeout:.0f} s\n{(exc.stdout or b'')[-4000:]!r}\n")
        return {"status": f"timeout after {timeout:.0f} s", "wall_s": round(time.perf_counter() - t0, 2)}
    wall = round(time.perf_counter() - t0, 2)
    log.write_text(f"$ {' '.join(cmd)}\nrc={proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}\n")
    found = STEP.findall(proc.stdout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"status": f"failed rc={proc.returncode}: {' | '.join(tail)}"[:400], "wall_s": wall}
    out: dict[str, Any] = {"status": "ok", "wall_s": wall}
    if found:
        out["step_ms"] = float(found[-1])
    return out


def markdown(doc: dict[str, Any]) -> str:
    """The table: plain step time, speed-up on the baseline, the recording's status."""
    lines = ["# Thirteenth held-out set: plain step times and recordings", "",
             f"{doc['elapsed_s']} s in all; plain: mean step time over steps 4..11 (host wall clock, no profiler).", "",
             "| workload | variant | plain ms | vs baseline | plain run | recording |", "| --- | --- | --- | --- | --- | --- |"]
    rows: dict[str, dict[str, dict[str, Any]]] = doc["runs"]
    for name, entries in rows.items():
        base = entries.get("baseline", {}).get("plain", {}).get("step_ms")
        for key, entry in entries.items():
            plain, prof = entry.get("plain", {}), entry.get("profile", {})
            ms = plain.get("step_ms")
            speed = f"{float(base) / float(ms):.2f}x" if base and ms else "-"
            lines.append(f"| {name} | {key} | {ms if ms is not None else '-'} | {speed} | "
                         f"{str(plain.get('status', 'not run'))[:100]} | {str(prof.get('status', 'not run'))[:100]} |")
    skipped: list[str] = doc["skipped"]
    if skipped:
        lines += ["", "Skipped for the budget:", *[f"- {s}" for s in skipped]]
    return "\n".join(lines) + "\n"


def guess(phase: str, name: str, variant: str | None, plain_wall: float) -> float:
    """Expected seconds of one run: the table's figure, or for a recording at least 2.2x the plain run."""
    plain_s, record_s = EXPECTS.get((name, variant), (12.0, 14.0))
    return plain_s if phase == "plain" else max(record_s, 2.2 * plain_wall)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=400.0, help="seconds for all runs (default 400)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds at most for one run (default 120)")
    p.add_argument("--only", nargs="*", choices=list(WORKLOADS), default=list(WORKLOADS), help="workloads (default: all)")
    args = p.parse_args()
    out = Path(os.environ.get("OUT", "/tmp/out"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in args.only}
    skipped: list[str] = []
    # phase 1: plain runs; phase 2: one group per workload, its baseline recording then its variant's
    groups: list[list[tuple[str, str, str | None]]] = [[("plain", n, v)] for n in args.only for v in (None, *WORKLOADS[n])]
    groups += [[("profile", n, v) for v in (None, *WORKLOADS[n])] for n in args.only]

    def save() -> None:
        doc = {"budget_s": args.budget, "elapsed_s": round(time.perf_counter() - start, 1), "skipped": skipped,
               "python": sys.version.split()[0], "runs": runs}
        (out / "heldout13_runs.json").write_text(json.dumps(doc, indent=1))
        (out / "heldout13_runs.md").write_text(markdown(doc))

    for group in groups:
        walls = {v: float(runs[n].get(v or "baseline", {}).get("plain", {}).get("wall_s", 0.0)) for _, n, v in group}
        need = sum(guess(ph, n, v, walls[v]) for ph, n, v in group)
        left = args.budget - (time.perf_counter() - start)
        if need > left:
            for ph, n, v in group:
                skipped.append(f"{ph}: {n} {v or 'baseline'} (its group expects {need:.0f} s, {left:.0f} s left)")
                print(f"skip {ph} {n} {v or 'baseline'}: group expects {need:.0f} s, {left:.0f} s left", flush=True)
            save()
            continue
        for phase, name, variant in group:
            key = variant or "baseline"
            entry = runs[name].setdefault(key, {})
            left = args.budget - (time.perf_counter() - start)
            script = str(HERE / f"{name}.py")
            vargs = ["--variant", variant] if variant else []
            tag = f"ho13_{name}" + (f"_{variant}" if variant else "")
            if phase == "plain":
                cmd = [sys.executable, script, *vargs]
            else:
                cmd = [sys.executable, "-m", "tracekit", "profile", "--warmup", "2", "--active", "4", "--no-report", "--force",
                       "-o", str(out / f"{tag}.trace.json.gz"), script, *vargs, "--steps", "8"]
            entry[phase] = r = run(cmd, env_for(name, variant), min(args.timeout, max(left, 1.0)), out / "logs" / f"{tag}.{phase}.log")
            print(f"{phase:7s} {name:18s} {key:16s} {str(r['status'])[:60]:60s} wall {r['wall_s']:6.1f} s "
                  f"step {r.get('step_ms', float('nan')):9.3f} ms", flush=True)
            save()
    save()
    print((out / "heldout13_runs.md").read_text())


if __name__ == "__main__":
    main()
