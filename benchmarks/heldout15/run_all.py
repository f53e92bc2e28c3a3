"""Times every workload of the fifteenth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout15/run_all.py [--budget S]
Phase 1 runs every (workload, variant) once as a plain subprocess (default 12 steps) and parses its
`mean step time` line: first each workload's baseline and labelled variant, then the extra
(unlabelled) variants, cheapest first, each only if it still leaves the expected time of every
recording; an extra variant that does not fit there is run after the recordings instead, if time is
left. Phase 2 records, workload by workload, the baseline and then its labelled variant (never the
extra one), each as `python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho15_NAME[_VARIANT].trace.json.gz benchmarks/heldout15/NAME.py [--variant V] --steps 8` (the
profile rows of README.md), so that a budget cut leaves whole pairs: a pair is started only if both
of its recordings are expected to fit in what is left of --budget (a plain run likewise). The one
workload that compiles with inductor (`dino_counter_recompile`) is recorded last. After every run it
writes $OUT/heldout15_runs.json and $OUT/heldout15_runs.md (default $OUT: /tmp/out) and each run's
output tail to $OUT/logs/.
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
# script -> (its labelled variant, its extra variant or None), in README.md's order; the baseline
# (no --variant) is run first. Extra variants are timed in phase 1 only, never recorded.
WORKLOADS: dict[str, tuple[str, str | None]] = {
    "ldm_vae_encode_loop": ("cache_latents", "compiled"),
    "dino_counter_recompile": ("counter_outside", None),
    "mla_naive_decode": ("absorb", None),
    "triton_rope_inner_jit": ("module_kernel", None),
    "vmoe_einsum_dispatch": ("index_dispatch", "compiled"),
    "gtr_t5_wo_fp32": ("all_bf16", "compiled"),
    "gpt2_ngram_host": ("gpu_ngram", None),
    "lora_tenant_loop": ("batched_lora", "cuda_graph"),
    "nf4_fp32_compute": ("fp16_compute", "compiled"),
    "dt_rollout_grad_mode": ("inference_mode", "cuda_graph"),
}
# phase 2's order: the inductor-compiled workload last
RECORD_ORDER = [n for n in WORKLOADS if n != "dino_counter_recompile"] + ["dino_counter_recompile"]
COMPILES = {"dino_counter_recompile"}  # its plain runs include a cold inductor compile and 7 recompiles
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5. Extra variants have no recording.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("ldm_vae_encode_loop", None): (9.0, 21.0),
    ("ldm_vae_encode_loop", "cache_latents"): (9.0, 19.5),
    ("ldm_vae_encode_loop", "compiled"): (150.0, 0.0),
    ("dino_counter_recompile", None): (60.0, 66.0),
    ("dino_counter_recompile", "counter_outside"): (21.0, 30.0),
    ("mla_naive_decode", None): (9.0, 19.5),
    ("mla_naive_decode", "absorb"): (7.5, 18.0),
    ("triton_rope_inner_jit", None): (10.5, 22.5),
    ("triton_rope_inner_jit", "module_kernel"): (9.0, 19.5),
    ("vmoe_einsum_dispatch", None): (9.0, 21.0),
    ("vmoe_einsum_dispatch", "index_dispatch"): (7.5, 19.5),
    ("vmoe_einsum_dispatch", "compiled"): (90.0, 0.0),
    ("gtr_t5_wo_fp32", None): (7.5, 18.0),
    ("gtr_t5_wo_fp32", "all_bf16"): (7.5, 18.0),
    ("gtr_t5_wo_fp32", "compiled"): (60.0, 0.0),
    ("gpt2_ngram_host", None): (9.0, 21.0),
    ("gpt2_ngram_host", "gpu_ngram"): (7.5, 18.0),
    ("lora_tenant_loop", None): (9.0, 22.5),
    ("lora_tenant_loop", "batched_lora"): (7.5, 18.0),
    ("lora_tenant_loop", "cuda_graph"): (9.0, 0.0),
    ("nf4_fp32_compute", None): (9.0, 19.5),
    ("nf4_fp32_compute", "fp16_compute"): (7.5, 18.0),
    ("nf4_fp32_compute", "compiled"): (67.5, 0.0),
    ("dt_rollout_grad_mode", None): (7.5, 19.5),
    ("dt_rollout_grad_mode", "inference_mode"): (7.5, 18.0),
    ("dt_rollout_grad_mode", "cuda_graph"): (7.5, 0.0),
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
    lines = ["# Fifteenth held-out set: plain step times and recordings", "",
             f"{doc['elapsed_s']} s in all; plain: mean step time over steps 4..11 (host wall clock, no profiler); "
             "extra variants are timed, not recorded.", "",
             "| workload | variant | plain ms | vs baseline | plain run | recording |", "| --- | --- | --- | --- | --- | --- |"]
    rows: dict[str, dict[str, dict[str, Any]]] = doc["runs"]
    for name, entries in rows.items():
        base = entries.get("baseline", {}).get("plain", {}).get("step_ms")
        for key, entry in entries.items():
            plain, prof = entry.get("plain", {}), entry.get("profile", {})
            ms = plain.get("step_ms")
            speed = f"{float(base) / float(ms):.2f}x" if base and ms else "-"
            label = f"{key} (extra)" if entry.get("extra") else key
            recording = "-" if entry.get("extra") else str(prof.get("status", "not run"))[:100]
            lines.append(f"| {name} | {label} | {ms if ms is not None else '-'} | {speed} | "
                         f"{str(plain.get('status', 'not run'))[:100]} | {recording} |")
    skipped: list[str] = doc["skipped"]
    if skipped:
        lines += ["", "Skipped for the budget:", *[f"- {s}" for s in skipped]]
    return "\n".join(lines) + "\n"


def guess(phase: str, name: str, variant: str | None, plain_wall: float) -> float:
    """Expected seconds of one run: the table's figure, or for a recording at least 2.2x the plain run
    (not for the compiling workload, whose plain runs include a cold compile)."""
    plain_s, record_s = EXPECTS.get((name, variant), (12.0, 20.0))
    if phase == "plain":
        return plain_s
    return record_s if name in COMPILES else max(record_s, 2.2 * plain_wall)


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

    def save() -> None:
        doc = {"budget_s": args.budget, "elapsed_s": round(time.perf_counter() - start, 1), "skipped": skipped,
               "python": sys.version.split()[0], "runs": runs}
        (out / "heldout15_runs.json").write_text(json.dumps(doc, indent=1))
        (out / "heldout15_runs.md").write_text(markdown(doc))

    def reserve() -> float:
        """The expected seconds of the recordings not yet run."""
        return sum(guess("profile", n, v, float(runs[n].get(v or "baseline", {}).get("plain", {}).get("wall_s", 0.0)))
                   for n in recorded for v in (None, WORKLOADS[n][0]) if "profile" not in runs[n].get(v or "baseline", {}))

    pending = list(groups)
    while pending:
        group = pending.pop(0)
        phase0 = group[0][0]
        walls = {v: float(runs[n].get(v or "baseline", {}).get("plain", {}).get("wall_s", 0.0)) for _, n, v in group}
        need = sum(guess("profile" if ph == "profile" else "plain", n, v, walls[v]) for ph, n, v in group)
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
            tag = f"ho15_{name}" + (f"_{variant}" if variant else "")
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
    print((out / "heldout15_runs.md").read_text())


if __name__ == "__main__":
    main()
