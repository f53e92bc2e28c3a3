"""Each rule against its before/after pairs: does it come first on before, is its what-if saving within ±35 % of the measured unprofiled saving, is it silent once the fix is made; then precision and recall over labelled traces.

    python benchmarks/validate_suggestions.py [--default]

The pairs are benchmarks/validate_pairs.py's PAIRS (before trace, after trace, the rule whose change
the fix makes); the measured unprofiled steps are the trace's own bare run (`tracekit.bare`), else
the measurement files validate_projection.py reads. `--default` prices with the default profiler
overhead even where the trace carries bare timings.

Precision and recall: every trace of a pair is labelled with the rules an engineer would accept on it
(LABELS: the pair's rule on its before trace, plus the other fixes measured to help there; nothing on
an after trace unless its own measurement shows a further fix would pay). A shown suggestion of a
labelled rule is a true positive, any other shown suggestion a false positive, a label no suggestion
shows a false negative; the (trace, rule) cases that the measurements cannot decide (UNDECIDED) are
left out and listed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from validate_pairs import PAIRS, side  # noqa: E402
from validate_projection import measured_ms  # noqa: E402

WITHIN = 0.35  # the bar for a what-if saving against the measured one
# Labels beyond "the pair's rule on its before trace" (each with the measurement that backs it).
TF32 = "docs/measurements/tf32_labels_h200.txt"  # the script as written vs TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1
GRAPHS = "docs/measurements/cudagraphs_try_h200.txt"  # tracekit profile --try cudagraphs
EXTRA_LABELS: dict[str, frozenset[str]] = {
    # a CUDA graph of the same loop measured 4.573 -> 0.822 ms (docs/measurements/pairs.json, small_matmul)
    "small_matmul_loop": frozenset({"cuda_graphs"}),
    "bare/small_matmul_loop": frozenset({"cuda_graphs"}),
    # CUDA graphs of the model measured (GRAPHS): train_compile_eager 9.09 -> 7.17 ms, train_conv_bf16
    # 13.10 -> 4.81 ms, train_conv_fast 6.86 -> 4.64 ms, train_llm 14.29 -> 6.65 ms, train_llm_fused
    # 12.53 -> 5.42 ms; train_optimizer_fused 13.77 -> 14.30 ms (no gain: not labelled)
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
# (trace, rule) the measurements cannot decide either way: left out of precision and recall. TF32 on
# the tokenizer scripts: their own step time varies 38.5-56.0 ms between runs of the same command
# (TF32, last lines), more than TF32 changes it (train_tokenize 56.0 -> 52.5 ms, train_tokenize_wide
# 54.2 -> 53.4 ms in one run)
UNDECIDED: frozenset[tuple[str, str]] = frozenset({
    ("bare/train_tokenize", "lower_precision"), ("bare/train_tokenize_fixed", "lower_precision"),
    ("bare/train_tokenize_wide", "lower_precision"),
})


def labels() -> dict[str, frozenset[str]]:
    """trace stem -> the rules accepted on it."""
    out: dict[str, set[str]] = {}
    for before, after, rule in PAIRS:
        out.setdefault(before, set()).add(rule)
        out.setdefault(after, set())
    for stem, extra in EXTRA_LABELS.items():
        if stem in out:
            out[stem] |= extra
    return {k: frozenset(v) for k, v in out.items()}


def ms(us: float | None) -> str:
    return "–" if us is None else f"{us / 1000:.3f}"


def main(argv: list[str]) -> int:
    use_default = "--default" in argv
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
    for before, after, rule in PAIRS:
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
    tp = fp = fn = 0
    wrong: list[str] = []
    for stem, accepted in labels().items():
        s = get(stem)
        if s is None:
            continue
        shown = {x.id for x in s["suggestions"]}  # type: ignore[attr-defined]
        undecided = {rule for trace, rule in UNDECIDED if trace == stem}
        shown, accepted = shown - undecided, accepted - undecided
        tp += len(shown & accepted)
        fp += len(shown - accepted)
        fn += len(accepted - shown)
        wrong += [f"`{stem}`: {r} shown, not labelled" for r in sorted(shown - accepted)]
        wrong += [f"`{stem}`: {r} labelled, not shown" for r in sorted(accepted - shown)]
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    print(f"labelled traces: {len(labels())}; true positives {tp}, false positives {fp}, false negatives {fn}: "
          f"precision {precision:.2f}, recall {recall:.2f}")
    for line in wrong:
        print(f"- {line}")
    print("left out (undecided): " + ", ".join(f"`{t}` {r}" for t, r in sorted(UNDECIDED)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
