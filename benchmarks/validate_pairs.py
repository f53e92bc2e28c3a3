"""Before/after pairs: traced, projected and measured unprofiled step, the verdict, and the first suggestion's what-if saving against the measured one.

    python benchmarks/validate_pairs.py [--default]

Each pair is a trace before a fix and one after it, with the rule whose change the fix makes. The
measured unprofiled steps come from the trace's own bare run (tracekit profile times the steps without
the profiler: `tracekit.bare` in the file) when it has one, else from the measurement files that
benchmarks/validate_projection.py reads (docs/measurements/pairs.json, optimizer_pairs.json,
docs/validation.md). `--default` projects with the default profiler overhead even where the trace
carries bare timings (the untuned check of the projection itself); without it the bare timings
calibrate each trace's own projection, and only the what-if of the change is a prediction.

Prints one markdown table; the verdict is judged right when the projected verdict is gpu-bound exactly
when the measured unprofiled GPU share (the GPU's own time as traced: busy less pageable copies and
exposed collectives, / the measured step) is ≥ 80 %.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from validate_projection import measured_ms  # noqa: E402

from tracekit.analyzers.totals import GPU_BOUND, GPU_BOUND_SHARE  # noqa: E402
from tracekit.model.projection import DEFAULT_OVERHEAD  # noqa: E402
from tracekit.pipeline.local import analyse_trace, load_file  # noqa: E402

SAMPLES = ROOT / "sample_traces"
# (before, after, the rule the fix answers): the files are sample_traces/NAME.trace.json.gz
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("gpt2_decode", "gpt2_decode_graph", "cuda_graphs"),
    ("small_matmul_loop", "small_matmul_graph", "cuda_graphs"),
    ("small_matmul_loop", "small_matmul_bmm", "batch_bmm"),
    ("train_dataloader", "train_dataloader_fixed", "dataloader_workers"),
    ("train_copies", "train_copies_fixed", "pinned_memory"),
    ("train_sync", "train_sync_fixed", "avoid_sync"),
    ("train_optimizer_loop", "train_optimizer_fused", "fused_optimizer"),
    ("linear_fp32", "linear_tf32", "lower_precision"),
    ("attention_naive", "attention_sdpa", "use_sdpa"),
    ("elementwise_eager", "elementwise_compiled", "fuse_elementwise"),
    ("bare/gpt2_decode", "bare/gpt2_decode_graph", "cuda_graphs"),
    ("bare/train_gpu_bound", "bare/train_gpu_bound_bf16", "lower_precision"),
    ("bare/train_balanced", "bare/train_balanced_graphed", "cuda_graphs"),
    ("bare/train_compile_eager", "bare/train_compile", "fuse_elementwise"),
    ("bare/train_dataloader", "bare/train_dataloader_fixed", "dataloader_workers"),
    ("bare/train_sync", "bare/train_sync_fixed", "avoid_sync"),
    ("bare/train_copies", "bare/train_copies_fixed", "pinned_memory"),
    ("bare/train_optimizer_loop", "bare/train_optimizer_fused", "fused_optimizer"),
    ("bare/small_matmul_loop", "bare/small_matmul_bmm", "batch_bmm"),
    ("bare/attention_causal_mask", "bare/attention_causal_mask_fixed", "causal_mask"),
    ("bare/train_tokenize", "bare/train_tokenize_fixed", "preprocess_off_thread"),
    ("bare/train_tokenize_wide", "bare/train_tokenize_wide_fixed", "preprocess_off_thread"),
    ("bare/train_conv", "bare/train_conv_channels_last", "channels_last"),
    ("bare/train_conv", "bare/train_conv_bf16", "lower_precision"),
    ("bare/train_autocast", "bare/train_autocast_bf16", "lower_precision"),
    ("bare/train_conv_bf16", "bare/train_conv_fast", "channels_last"),
    ("bare/decode_gemv", "bare/decode_gemv_int8", "quantize_weights"),
    ("bare/train_llm", "bare/train_llm_fused", "fused_llm_kernels"),
    ("bare/decode_requests", "bare/decode_requests_batched", "batch_decode"),
    ("bare/compile_graph_breaks", "bare/compile_graph_breaks_fixed", "graph_breaks"),
    ("bare/triton_matmul_tiles", "bare/triton_matmul_tiles_fixed", "triton_config"),
    ("bare/lm_head_vocab", "bare/lm_head_vocab_fixed", "align_dims"),
    ("bare/decode_cudnn_plans", "bare/decode_cudnn_plans_fixed", "attention_plans"),
    ("bare/eval_grad_mode", "bare/eval_grad_mode_fixed", "inference_mode"),
)


def ms(us: float | None) -> str:
    return "–" if us is None else f"{us / 1000:.3f}"


def pct(a: float | None, b: float | None) -> str:
    return "–" if a is None or not b else f"{100 * (a - b) / b:+.0f}%"


def side(stem: str, measured: dict[str, tuple[float, str]], use_default: bool,
         root: Path = SAMPLES) -> dict[str, object] | None:
    path = root / f"{stem}.trace.json.gz"
    if not path.exists():
        return None
    trace = load_file(path)
    # --default: the default overhead only; the bare steps stay the measurement
    result = analyse_trace(trace, overhead=DEFAULT_OVERHEAD, use_bare=not use_default)
    u = result.analysis.unprofiled
    bare = trace.rank().meta.bare
    steady = list(result.analysis.ranks[0].launch.steady_steps)
    m_us = bare.median_us(steady) if bare is not None else None
    timed = [us for step, us in bare.step_us if step in set(steady)] if bare is not None else []
    m_range = (min(timed), max(timed)) if timed else None
    source = "bare run" if m_us is not None else ""
    if m_us is None and stem.split("/")[-1] in measured and "/" not in stem:
        value, source = measured[stem]
        m_us = value * 1000
    t = result.analysis.totals  # the GPU's own time (busy less pageable copies and exposed collectives)
    busy = max(t.gpu_busy_us - t.pageable_copy_us - t.comm_exposed_us, 0.0) / max(t.steps, 1)
    return {"u": u, "measured": m_us, "range": m_range, "source": source, "busy": busy, "suggestions": result.suggestions,
            "verdict": result.analysis.verdict, "label": u.label if u is not None and u.trusted else "abstains"}


def within(projected: float | None, lo: float | None, hi: float | None, tol: float = 0.15) -> bool:
    """`projected` within ±tol of some value in [lo, hi] (of the one measured value when lo == hi)."""
    return projected is not None and lo is not None and hi is not None and lo * (1 - tol) <= projected <= hi * (1 + tol)


def read_pairs(path: Path) -> tuple[tuple[str, str, str], ...]:
    """Rows 'BEFORE AFTER RULE' (trace stems relative to the file's folder; '#' starts a comment)."""
    rows = []
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) == 3:
            rows.append((words[0], words[1], words[2]))
    return tuple(rows)


def main(argv: list[str]) -> int:
    use_default = "--default" in argv
    root, pairs = SAMPLES, PAIRS
    if "--pairs" in argv:  # held-out pairs: --pairs DIR/pairs.txt, traces beside it
        listed = Path(argv[argv.index("--pairs") + 1])
        root, pairs = listed.parent, read_pairs(listed)
    measured = measured_ms()
    print("| before → after | fix | traced ms | projected ms | measured ms | measured steps ms | error | "
          "verdict (projected) | measured GPU share | verdict right | first suggestion | predicted ms | "
          "with above ms | rule's what-if ms | measured saving ms | error |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---|---|---:|---:|---:|---:|---:|")
    n = strict = band = right_n = judged = first_ok = saving_ok = fixes = 0
    for before, after, rule in pairs:
        b, a = side(before, measured, use_default, root), side(after, measured, use_default, root)
        if b is None or a is None:
            continue
        for name, s in ((before, b), (after, a)):
            u = s["u"]
            m = s["measured"]
            lo, hi = s["range"] or (m, m)
            p = u.step_us if u and u.trusted else None
            if m:
                n += 1
                strict += within(p, m, m)
                band += within(p, lo, hi)
            share = s["busy"] / m if m else None
            ok = share is not None and (s["verdict"] == GPU_BOUND) == (share >= GPU_BOUND_SHARE)
            judged += share is not None
            right_n += ok
            right = "–" if share is None else ("yes" if ok else "NO")
            if name == before:
                sug = s["suggestions"]
                first = sug[0] if sug else None
                mine = next((x for x in sug if x.id == rule), None)
                realised = (b["measured"] - a["measured"]) if b["measured"] and a["measured"] else None
                fixes += 1
                first_ok += bool(first and first.id == rule)
                saving_ok += bool(mine and realised and realised > 0 and abs(mine.per_step_us - realised) <= 0.35 * realised)
                tail = (f"{first.id if first else '–'} | {ms(first.per_step_us) if first else '–'} | "
                        f"{ms(first.combined_us / max(u.projected.steps, 1)) if first and first.combined_us else '–'} | "
                        f"{ms(mine.per_step_us) if mine else '–'} | {ms(realised)} | "
                        f"{pct(mine.per_step_us if mine else None, realised)}")
            else:
                tail = "| | | | |"
            spread = f"{ms(lo)}–{ms(hi)}" if s["range"] else "–"
            print(f"| `{name}` | {rule if name == before else ''} | {ms(u.traced_step_us) if u else '–'} | "
                  f"{ms(p)} | {ms(m)} {s['source']} | {spread} | "
                  f"{pct(p, m)} | {s['label']} | "
                  f"{'–' if share is None else f'{100 * share:.0f}%'} | {right} | {tail} |")
    print(f"\nprojected within ±15 % of the measured median: {strict} of {n}; within ±15 % of the measured "
          f"steps' range: {band} of {n}; verdict right: {right_n} of {judged}; first suggestion is the fix "
          f"made: {first_ok} of {fixes}; that rule's what-if within ±35 % of the measured saving: {saving_ok} of {fixes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
