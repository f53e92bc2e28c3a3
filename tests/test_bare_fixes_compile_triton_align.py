"""The graph_breaks, triton_config and align_dims pairs of sample_traces/bare/ (H200, each trace with its
own unprofiled step times): the rule is the first suggestion on the "before" trace, its what-if saving
within ±35 % of the measured one (before − after bare steps, both read from the files), and it is
silent on the "after" trace."""

from __future__ import annotations

import pytest
from test_bare_projection import BARE, _measured

from tracekit.pipeline.local import analyse_file

# (before, after, the rule whose change the pair makes)
FIXES = (
    ("compile_graph_breaks", "compile_graph_breaks_fixed", "graph_breaks"),
    ("triton_matmul_tiles", "triton_matmul_tiles_fixed", "triton_config"),
    ("lm_head_vocab", "lm_head_vocab_fixed", "align_dims"),
)


@pytest.mark.parametrize("before, after, rule", FIXES)
def test_what_if_against_the_measured_fix(before, after, rule):
    b_path, a_path = BARE / f"{before}.trace.json.gz", BARE / f"{after}.trace.json.gz"
    if not (b_path.exists() and a_path.exists()):
        pytest.skip(f"sample_traces/bare/{before} / {after} are not recorded in this checkout")
    b, a = analyse_file(b_path), analyse_file(a_path)
    realised = _measured(b, b_path) - _measured(a, a_path)
    assert b.suggestions[0].id == rule  # the first suggestion is the fix that was made
    assert b.suggestions[0].per_step_us == pytest.approx(realised, rel=0.35)
    assert rule not in {x.id for x in a.suggestions}  # silent once the change is made
