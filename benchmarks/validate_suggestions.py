"""Each rule against its before/after pairs: does it come first on before, is its what-if saving within ±35 % of the measured unprofiled saving, is it silent once the fix is made; then precision and recall over labelled traces.

    python benchmarks/validate_suggestions.py [--default] [--earlier-labels] [--pairs sample_traces/heldoutN/pairs.txt ...]

The pairs are benchmarks/validate_pairs.py's PAIRS (before trace, after trace, the rule whose change
the fix makes); the measured unprofiled steps are the trace's own bare run (`tracekit.bare`), else
the measurement files validate_projection.py reads. `--default` prices with the default profiler
overhead even where the trace carries bare timings. `--earlier-labels` counts as this script did
before the bar and the rejections: every pair's rule accepted on its before trace whatever its measured
saving, only the tokenizer cases undecided (EARLIER_UNDECIDED), one strict count.

Precision and recall: every trace of a pair is labelled with the rules an engineer would accept on it
(labels(): the pair's rule on its before trace where its measured saving clears the bar the rules use,
SILENT_BELOW_PCT of the measured step, plus the other fixes measured to help there, EXTRA_LABELS), and
with the rules measured not to pay there (rejected(): the pair's rule on its after trace, a pair's rule
below the bar on its before trace, REJECTED). Two counts:

- strict: a shown suggestion of an accepted rule is a true positive, any other shown suggestion a
  false positive (measured to fail or never measured), an accepted rule no suggestion shows a false
  negative;
- measured: the same, but a shown suggestion is counted only where a measurement decides it (accepted
  or rejected); the shown suggestions nothing measured are listed apart.

The (trace, rule) cases whose measurements cannot decide them (UNDECIDED) are left out of both and listed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from validate_pairs import PAIRS, SAMPLES, read_pairs, side  # noqa: E402
from validate_projection import measured_ms  # noqa: E402

from tracekit.suggestions.common import SILENT_BELOW_PCT  # noqa: E402

WITHIN = 0.35  # the bar for a what-if saving against the measured one
# Labels beyond "the pair's rule on its before trace" (each with the measurement that backs it).
TF32 = "docs/measurements/tf32_labels_h200.txt"  # the script as written vs TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1
GRAPHS = "docs/measurements/cudagraphs_try_h200.txt"  # tracekit profile --try cudagraphs
TRY17 = "docs/measurements/try_timed_heldout17_h100.txt"  # benchmarks/gpu/try_timed.sh on the seventeenth set
TRY18 = "docs/measurements/try_timed_heldout18_h100.txt"  # the same on three of the eighteenth set's fixed variants
EXTRA_LABELS: dict[str, frozenset[str]] = {
    # a CUDA graph of the same loop measured 4.573 -> 0.822 ms (docs/measurements/pairs.json, small_matmul)
    "small_matmul_loop": frozenset({"cuda_graphs"}),
    "bare/small_matmul_loop": frozenset({"cuda_graphs"}),
    # CUDA graphs of the model measured (GRAPHS): train_compile_eager 9.09 -> 7.17 ms, train_conv_bf16
    # 13.10 -> 4.81 ms, train_conv_fast 6.86 -> 4.64 ms, train_llm 14.29 -> 6.65 ms, train_llm_fused
    # 12.53 -> 5.42 ms; train_optimizer_fused 13.77 -> 14.30 ms: UNDECIDED
    "bare/train_compile_eager": frozenset({"cuda_graphs"}),
    "bare/train_conv_bf16": frozenset({"cuda_graphs"}),
    "bare/train_conv_fast": frozenset({"cuda_graphs"}),
    "bare/train_llm": frozenset({"cuda_graphs"}),
    "bare/train_llm_fused": frozenset({"cuda_graphs"}),
    # TF32 measured (TF32): train_sync 11.7 -> 7.0 ms, train_sync_fixed 9.8 -> 5.1 ms, train_copies_fixed
    # 7.4 -> 2.9 ms, train_tokenize_wide_fixed 45.0 -> 12.6 ms
    "train_sync": frozenset({"lower_precision"}),
    "bare/train_sync": frozenset({"lower_precision"}),
    "train_sync_fixed": frozenset({"lower_precision"}),
    "bare/train_sync_fixed": frozenset({"lower_precision"}),
    "train_copies_fixed": frozenset({"lower_precision"}),
    "bare/train_copies_fixed": frozenset({"lower_precision"}),
    "bare/train_tokenize_wide_fixed": frozenset({"lower_precision"}),
}
# Measured not to pay, beyond "the pair's rule on its after trace" (each with its measurement).
REJECTED: dict[str, frozenset[str]] = {
    # TF32 measured (TF32): train_copies 13.623 -> 13.927 ms (its GEMMs are cuBLAS fp32 ffma kernels:
    # the override is the change the rule names)
    "train_copies": frozenset({"lower_precision"}),
    "bare/train_copies": frozenset({"lower_precision"}),
    # bf16 autocast on the channels_last ResNet-18 is bare/train_conv_fast: 8.44 -> 10.87 ms (bare steps)
    "bare/train_conv_channels_last": frozenset({"lower_precision"}),
    # TRY17: torch.compile of the model made every step slower (7.43 → 11.19 ms; steps 6..15 10.05–12.70
    # against 7.10–7.85 as written)
    "heldout17/ho17_plant_photos_loader_worker_loader": frozenset({"fuse_elementwise"}),
}
# (trace, rule) the measurements cannot decide either way: left out of precision and recall.
# - TF32 on the tokenizer scripts: their own step time varies 38.5-56.0 ms between runs of the same
#   command (TF32, last lines), more than TF32 changes it (train_tokenize 56.0 -> 52.5 ms,
#   train_tokenize_wide 54.2 -> 53.4 ms in one run).
# - TF32 on train_dataloader_fixed (7.882 -> 7.812 ms) does not measure what lower_precision names
#   there: bf16 autocast of a conv net whose convolutions already run TF32 kernels (cuDNN allows TF32
#   by default; the override changes cuBLAS matmuls only, and the net has one small Linear).
# - CUDA graphs on train_optimizer_fused (GRAPHS: 13.77 -> 14.30 ms unprofiled): the run shows no graph
#   replayed: its profiled step rose 30.6 -> 32.3 ms, where every other replayed model cut it 2-4.5x
#   (15.5 -> 7.6, 22.8 -> 6.2, 19.7 -> 5.2, 30.3 -> 6.7, 17.8 -> 5.6 ms), so it did not apply the change.
# - quantize_weights on decode_gemv (0.583 -> 0.919 ms with int8 weights): the int8 GEMVs torch 2.11
#   offers without torchao (an Inductor-compiled dequantizing GEMV, torch._weight_int8pack_mm) are not
#   the kernel the rule prices (int8 weights at the bandwidth the bf16 GEMVs reach: torchao's, vLLM's),
#   which could not be installed (docs/validation.md, "Layer rule pairs").
# - torch.compile on two launch-bound fixed variants of the seventeenth set (TRY17): faster on average
#   (esm bf16 22.64 → 16.75 ms, ddpm foreach_ema 21.80 → 19.73 ms) but its steps overlap the steps as
#   written (14.40–23.88 against 21.42–25.37; 19.34–20.22 against 20.05–25.84).
UNDECIDED: frozenset[tuple[str, str]] = frozenset({
    ("heldout17/ho17_esm_mlm_fp32_bf16_autocast", "fuse_elementwise"),
    ("heldout17/ho17_ddpm_unet_ema_loop_foreach_ema", "fuse_elementwise"),
    ("heldout17/ho17_esm_mlm_fp32_bf16_autocast", "fused_llm_kernels"),
    ("bare/decode_gemv", "quantize_weights"),
    ("bare/train_tokenize", "lower_precision"), ("bare/train_tokenize_fixed", "lower_precision"),
    ("bare/train_tokenize_wide", "lower_precision"),
    ("train_dataloader_fixed", "lower_precision"), ("bare/train_dataloader_fixed", "lower_precision"),
    ("train_optimizer_fused", "cuda_graphs"), ("bare/train_optimizer_fused", "cuda_graphs"),
})


EARLIER_UNDECIDED = frozenset(x for x in UNDECIDED if x[0].startswith("bare/train_tokenize"))


Pairs = tuple[tuple[str, str, str], ...]
# Held-out traces (--pairs): fixes measured to help beyond the pair's own variants, each with its source.
# benchmarks/graph_checks/README.md (H100, 2026-12-05): the whole step in one CUDA graph, plain runs.
HELDOUT_EXTRA: dict[str, frozenset[str]] = {
    "heldout8/ho8_l2_penalty": frozenset({"cuda_graphs"}),  # 35.24 → 12.86 ms
    "heldout2/ho2_sgd_groups": frozenset({"cuda_graphs"}),  # 40.93 → 8.25 ms
    "heldout3/ho3_manual_adam": frozenset({"cuda_graphs"}),  # 28.45 → 11.05 ms
    "heldout8/ho8_compile_helpers": frozenset({"cuda_graphs"}),  # 30.51 → 11.11 ms (compile_model: 9.10)
    # sample_traces/heldout13/README.md (H100, 2026-12-06, third call): variants added after the first run
    "heldout13/ho13_nbeats_clip_loop": frozenset({"cuda_graphs"}),  # 50.37 → 15.55 ms, the whole step graphed
    "heldout13/ho13_triton_qknorm_rows": frozenset({"fuse_elementwise"}),  # 23.31 → 17.26 ms, torch.compile
    "heldout13/ho13_fp8_fake_quant": frozenset({"fused_llm_kernels", "fuse_elementwise"}),  # 37.21 → 16.33, compile
    "heldout13/ho13_vae_decode_fp32": frozenset({"fuse_elementwise"}),  # 58.98 → 35.47 ms, torch.compile
    # sample_traces/heldout14/README.md (H100, 2026-12-06, first call): extra variants faster than their
    # baseline in the same call (swa_roll_cache's cuda_graph was slower: 42.80 → 54.99 ms, not listed)
    "heldout14/ho14_hifigan_weight_norm": frozenset({"cuda_graphs"}),  # 58.05 → 11.18 ms, the chunk graphed
    "heldout14/ho14_segformer_tta_loop": frozenset({"cuda_graphs"}),  # 56.28 → 11.14 ms, the step graphed
    # sample_traces/heldout15/README.md (H100, 2026-12-06, first and second calls): extra variants faster
    # than their baseline in the same call
    "heldout15/ho15_gtr_t5_wo_fp32": frozenset({"fuse_elementwise"}),  # 49.71 → 36.29 ms, torch.compile
    "heldout15/ho15_lora_tenant_loop": frozenset({"cuda_graphs"}),  # 81.26 → 19.81 ms, the step graphed
    "heldout15/ho15_dt_rollout_grad_mode": frozenset({"cuda_graphs"}),  # 19.25 → 14.74 ms, an env step graphed
    "heldout15/ho15_nf4_fp32_compute": frozenset({"fuse_elementwise"}),  # 38.54 → 28.76 ms, torch.compile
    "heldout15/ho15_vmoe_einsum_dispatch": frozenset({"fuse_elementwise"}),  # 76.63 → 30.06 ms, torch.compile
    "heldout15/ho15_ldm_vae_encode_loop": frozenset({"fuse_elementwise"}),  # 34.79 → 27.93 ms, torch.compile
    # TRY17 (timed-only --try, one run per knob; accepted where the knob's steps 6..15 all run faster than
    # every step as written): the further fixes shown on the seventeenth set's traces
    "heldout17/ho17_esm_mlm_fp32_bf16_autocast": frozenset({"cuda_graphs"}),  # 22.64 → 9.46 ms (compile: 16.75)
    "heldout17/ho17_ddpm_unet_ema_loop_foreach_ema": frozenset({"cuda_graphs"}),  # 21.80 → 4.82 ms (compile: 19.73)
    "heldout17/ho17_plant_photos_loader_worker_loader": frozenset({"cuda_graphs"}),  # 7.43 → 4.66 ms
    "heldout17/ho17_sasrec_catalog_plus_one_padded_catalog": frozenset({"fuse_elementwise"}),  # 9.33 → 7.86 ms
    # fused_llm_kernels names torch.compile as its other way (as on heldout13 fp8_fake_quant above)
    "heldout17/ho17_dit_latent_manual_attn_sdpa": frozenset({"fuse_elementwise", "fused_llm_kernels"}),  # 27.22 → 21.17
    "heldout17/ho17_esm_mlm_fp32": frozenset({"fuse_elementwise", "fused_llm_kernels"}),  # 49.58 → 46.52 ms
    # TRY18 (as TRY17): torch.compile of the fused-qkv music GPT, 18.03 → 13.63 ms (steps 13.49–13.98
    # against 17.92–18.12 as written)
    "heldout18/ho18_midi_gpt_per_head_linears_fused_qkv": frozenset({"fuse_elementwise"}),
    # TRY18, ninth session: torch.compile of the QAT NeRF baseline, 34.22 → 13.82 ms (steps 13.77–13.86
    # against 34.08–34.32 as written): faster than the labelled fused fake-quant ops (34.4 → 23.3 bare)
    "heldout18/ho18_nerf_qat_fake_quant": frozenset({"fuse_elementwise"}),
}


def heldout_pairs(files: list[str]) -> Pairs:
    """The pairs of held-out pairs files, their stems relative to sample_traces/ ('none': no rule's fix)."""
    out = []
    for name in files:
        path = Path(name).resolve()
        rel = path.parent.relative_to(SAMPLES.resolve()).as_posix()
        out += [(f"{rel}/{b}", f"{rel}/{a}", rule) for b, a, rule in read_pairs(path)]
    return tuple(out)


def below_bar(get: Callable[[str], dict[str, object] | None], pairs: Pairs = PAIRS) -> list[tuple[str, str, float, float]]:
    """(before, rule, measured saving µs, before's measured step µs) of the pairs whose measured saving
    is under SILENT_BELOW_PCT of the before step: the fix does not pay as much as a shown suggestion
    must, so the rule's silence there is right and its firing would be false."""
    out = []
    for before, after, rule in pairs:
        b, a = get(before), get(after)
        if b is None or a is None or not b["measured"] or not a["measured"]:
            continue
        saving, step = float(b["measured"]) - float(a["measured"]), float(b["measured"])  # type: ignore[arg-type]
        if saving < SILENT_BELOW_PCT / 100 * step:
            out.append((before, rule, saving, step))
    return out


def labels(low: Iterable[tuple[str, str]] = (), pairs: Pairs = PAIRS,
           extra_labels: dict[str, frozenset[str]] = EXTRA_LABELS) -> dict[str, frozenset[str]]:
    """trace stem -> the rules accepted on it (`low`: the (before, rule) pairs below the bar, not accepted)."""
    out: dict[str, set[str]] = {}
    for before, after, rule in pairs:
        out.setdefault(before, set())
        if (before, rule) not in low and rule != "none":
            out[before].add(rule)
        out.setdefault(after, set())
    for stem, extra in extra_labels.items():
        if stem in out:
            out[stem] |= extra
    return {k: frozenset(v) for k, v in out.items()}


def rejected(low: Iterable[tuple[str, str]] = (), pairs: Pairs = PAIRS) -> dict[str, frozenset[str]]:
    """trace stem -> the rules measured not to pay on it."""
    out: dict[str, set[str]] = {}
    for _before, after, rule in pairs:
        out.setdefault(after, set()).add(rule)
    for stem, rule in low:
        out.setdefault(stem, set()).add(rule)
    for stem, extra in REJECTED.items():
        out.setdefault(stem, set()).update(extra)
    return {k: frozenset(v) for k, v in out.items()}


def ms(us: float | None) -> str:
    return "–" if us is None else f"{us / 1000:.3f}"


def main(argv: list[str]) -> int:
    use_default = "--default" in argv
    files = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--pairs"]
    pairs, extra = (heldout_pairs(files), HELDOUT_EXTRA) if files else (PAIRS, EXTRA_LABELS)
    measured = measured_ms()
    sides: dict[str, dict[str, object] | None] = {}

    def get(stem: str) -> dict[str, object] | None:
        if stem not in sides:
            sides[stem] = side(stem, measured, use_default)
        return sides[stem]

    print("| rule | before → after | first on before | rule's what-if ms | measured saving ms | error | "
          "within ±35 % | silent after | shown on after |")
    print("|---|---|---|---:|---:|---:|---|---|---|")
    n = first_ok = within_ok = silent_ok = 0
    for before, after, rule in pairs:
        b, a = get(before), get(after)
        if b is None or a is None:
            continue
        n += 1
        sb, sa = list(b["suggestions"]), list(a["suggestions"])  # type: ignore[call-overload]
        first = sb[0].id if sb else "–"
        mine = next((x for x in sb if x.id == rule), None)
        realised = (b["measured"] - a["measured"]) if b["measured"] and a["measured"] else None  # type: ignore[operator]
        err = (mine.per_step_us - realised) / realised if mine and realised else None
        ok_within = err is not None and abs(err) <= WITHIN
        silent = all(x.id != rule for x in sa)
        first_ok += first == rule
        within_ok += ok_within
        silent_ok += silent
        print(f"| {rule} | `{before}` → `{after}` | {first}{' ✓' if first == rule else ''} | "
              f"{ms(mine.per_step_us) if mine else '–'} | {ms(realised)} | "
              f"{'–' if err is None else f'{100 * err:+.0f}%'} | {'yes' if ok_within else 'no'} | "
              f"{'yes' if silent else 'NO'} | {', '.join(x.id for x in sa) or '–'} |")
    print(f"\n{n} pairs: the pair's rule first on {first_ok}, its saving within ±35 % on {within_ok}, "
          f"silent after the fix on {silent_ok}")
    earlier = "--earlier-labels" in argv
    low = [] if earlier else below_bar(get, pairs)
    undecided_cases = EARLIER_UNDECIDED if earlier else UNDECIDED
    for before, rule, saving, step in [x for x in low if (x[0], x[1]) not in undecided_cases]:
        print(f"- below the bar: `{before}` {rule} measured {saving / 1000:+.3f} ms of {step / 1000:.3f} ms "
              f"(< {SILENT_BELOW_PCT:g} %): not accepted, its silence is right")
    low_keys = {(b, r) for b, r, _, _ in low}
    accepted_by, rejected_by = labels(low_keys, pairs, extra), ({} if earlier else rejected(low_keys, pairs))
    strict = [0, 0, 0]
    measured = [0, 0, 0]
    wrong: list[str] = []
    unmeasured: list[str] = []
    for stem, accepted in accepted_by.items():
        s = get(stem)
        if s is None:
            continue
        shown = {x.id for x in s["suggestions"]}  # type: ignore[attr-defined]
        undecided = {rule for trace, rule in undecided_cases if trace == stem}
        shown, accepted = shown - undecided, accepted - undecided
        no = rejected_by.get(stem, frozenset()) - accepted
        for counts, false in ((strict, shown - accepted), (measured, shown & no)):
            counts[0] += len(shown & accepted)
            counts[1] += len(false)
            counts[2] += len(accepted - shown)
        wrong += [f"`{stem}`: {r} shown, measured not to pay" for r in sorted(shown & no)]
        unmeasured += [f"`{stem}`: {r}" for r in sorted(shown - accepted - no)]
        wrong += [f"`{stem}`: {r} labelled, not shown" for r in sorted(accepted - shown)]
    counts = [("strict (a shown suggestion nothing measured counts as false)", strict)]
    if not earlier:
        counts.append(("measured (only what a measurement decides)", measured))
    for name, (tp, fp, fn) in counts:
        precision = tp / (tp + fp) if tp + fp else float("nan")
        recall = tp / (tp + fn) if tp + fn else float("nan")
        print(f"labelled traces: {len(accepted_by)}, {name}: true positives {tp}, false positives {fp}, "
              f"false negatives {fn}: precision {precision:.2f}, recall {recall:.2f}")
    for line in wrong:
        print(f"- {line}")
    heading = "shown, not accepted" if earlier else "shown, not measured either way (false in the strict count only)"
    print(f"{heading}: " + ", ".join(unmeasured))
    print("left out (undecided): " + ", ".join(f"`{t}` {r}" for t, r in sorted(undecided_cases)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
