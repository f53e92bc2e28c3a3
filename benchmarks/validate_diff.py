"""Print `tracekit diff` on before/after pairs: headline step change, attributed share, predicted vs realised, CI gate.

    python benchmarks/validate_diff.py BEFORE AFTER [BEFORE AFTER ...]

One markdown row per pair and per suggestion that fired on BEFORE. The step is the diff's headline
(measured unprofiled, else projected, else as traced: its kind in brackets), the traced step beside
it; "applied" says whether AFTER shows the suggestion's change; "realised" is the headline step's
change (only where applied), "its part" the traced change of the part the rule targets. The gate
columns say what `tracekit diff --fail-if-slower 5` exits with in each direction (1: slower by more
than 5 %).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tracekit.pipeline.compare import compare_results
from tracekit.pipeline.local import analyse_file
from tracekit.report.diff_text import slower_message
from tracekit.units import fmt_us

GATE_PCT = 5.0


def main(paths: list[str]) -> int:
    if len(paths) < 2 or len(paths) % 2:
        print(__doc__, file=sys.stderr)
        return 2
    print("| pair | headline step before → after | change | as traced | named share | gate before→after | "
          "gate after→before | suggestion | applied | predicted / step | realised / step | realised / predicted | "
          "its part, before − after | outcome |")
    print("|---|---|---:|---|---:|---:|---:|---|---|---:|---:|---:|---:|---|")
    for before_path, after_path in zip(paths[::2], paths[1::2], strict=True):
        before, after = analyse_file(before_path), analyse_file(after_path)
        forward, backward = compare_results(before, after), compare_results(after, before)
        step, traced = forward.headline, forward.step
        gate_ab = 1 if slower_message(forward, GATE_PCT) else 0
        gate_ba = 1 if slower_message(backward, GATE_PCT) else 0
        share = forward.attributed_share
        head = (f"| {Path(before_path).name} → {Path(after_path).name} | {fmt_us(step.before or 0)} → "
                f"{fmt_us(step.after or 0)} ({forward.headline_kind}; {forward.before_steps}/{forward.after_steps} "
                f"steps) | {step.pct:+.1f}% | {fmt_us(traced.before or 0)} → {fmt_us(traced.after or 0)} "
                f"({traced.pct:+.1f}%) | {'-' if share is None else f'{100 * share:.0f}%'} | {gate_ab} | {gate_ba} |")
        checks = forward.suggestions or ()
        if not checks:
            print(head + " (none fired) | | | | | | |")
        for c in checks:
            p, r, part = c.predicted_us_per_step, c.realised_us_per_step, c.part_saving_us
            ratio = "-" if not p or r is None else f"{r / p:.2f}"
            made = {True: "yes", False: "no", None: "cannot tell"}[c.applied]
            print(f"{head} `{c.id}` ({c.target}) | {made}: {c.applied_evidence} | "
                  f"{fmt_us(p) if p is not None else '-'} | {fmt_us(r) if r is not None else '-'} | {ratio} | "
                  f"{fmt_us(part) if part is not None else '-'} | {c.outcome or '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
