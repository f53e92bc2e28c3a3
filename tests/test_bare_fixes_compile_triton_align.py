"""The graph_breaks, triton_config and align_dims pairs of sample_traces/bare/ (H200, each trace with its
own unprofiled step times): the rule is the first suggestion on the "before" trace, its what-if saving
within ±35 % of the measured one (before − after bare steps, both read from the files), and it is
silent on the "after" trace."""

from __future__ import annotations

import pytest
from shared_analysis import analysed_file
from test_bare_projection import BARE, _measured

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
    b, a = analysed_file(b_path), analysed_file(a_path)
    realised = _measured(b, b_path) - _measured(a, a_path)
    assert b.suggestions[0].id == rule  # the first suggestion is the fix that was made
    assert b.suggestions[0].per_step_us == pytest.approx(realised, rel=0.35)
    assert b.suggestions[0].per_step_us <= b.analysis.unprofiled.step_us
    assert rule not in {x.id for x in a.suggestions}  # silent once the change is made


def test_cuda_graphs_waits_for_the_graph_breaks():
    """On compile_graph_breaks the CUDA-graph check fires (the step is launch-bound), but a graph cannot
    span the breaks: it is held back while graph_breaks fires (rules.WAITS_FOR), and suggested on the
    fixed trace, where the model is one compiled graph."""
    from tracekit.suggestions.rules import RULES_BY_ID, WAITS_FOR
    b_path, a_path = BARE / "compile_graph_breaks.trace.json.gz", BARE / "compile_graph_breaks_fixed.trace.json.gz"
    if not (b_path.exists() and a_path.exists()):
        pytest.skip("sample_traces/bare/compile_graph_breaks* are not recorded in this checkout")
    b, a = analysed_file(b_path), analysed_file(a_path)
    assert "graph_breaks" in WAITS_FOR["cuda_graphs"]
    assert RULES_BY_ID["cuda_graphs"].run(b.analysis) is not None
    assert [s.id for s in b.suggestions] == ["graph_breaks"]
    # its combined what-if is its own saving: priced again without the held-back suggestion
    assert b.suggestions[0].combined_us == pytest.approx(b.suggestions[0].saving_us)
    assert "cuda_graphs" in {s.id for s in a.suggestions}


def test_graph_breaks_evidence_on_the_h200_trace():
    """Every step of compile_graph_breaks holds (raw events) 12 TorchDynamo Cache Lookups, 12 regions
    (6 × "1/0", the blocks, and 6 × "2/0", their resume functions) and 6 aten::item: 12 compiled graphs,
    so 11 breaks, 6 of them at the blocks' .item() and 5 where the model's loop resumes."""
    path = BARE / "compile_graph_breaks.trace.json.gz"
    if not path.exists():
        pytest.skip("sample_traces/bare/compile_graph_breaks is not recorded in this checkout")
    s = analysed_file(path).suggestions[0]
    assert s.title.startswith("Remove torch.compile graph breaks: 11 breaks per step between 12 compiled "
                              "regions (12 cache lookups), at aten::item")
    per_step = {e["at"]: e["breaks_per_step"] for e in s.evidence}
    assert per_step == {"aten::item, aten::_local_scalar_dense": 6.0, "Python (no recorded op: a resumed frame)": 5.0}


def test_align_dims_evidence_on_the_h200_trace():
    """lm_head_vocab's three GEMMs (aten::mm, 8192 tokens × 768, vocab 50257) ran CUTLASS sm75 align1
    kernels on the sm_90 H200: the logits GEMM (N = 50257, its output's leading dim), the hidden-state
    gradient (K = 50257: the logits gradient, leading dim 50257) and the weight gradient (M = 50257: the
    transposed logits gradient, strides [1, 50257])."""
    path = BARE / "lm_head_vocab.trace.json.gz"
    if not path.exists():
        pytest.skip("sample_traces/bare/lm_head_vocab is not recorded in this checkout")
    s = analysed_file(path).suggestions[0]
    got = sorted((e["pad"], e["why"]) for e in s.evidence)
    assert got == [("K=50257 → 50304", "kernel align1; sm75 kernel on sm_90; leading dim A 50257"),
                   ("M=50257 → 50304", "kernel align1; sm75 kernel on sm_90; leading dim A 50257"),
                   ("N=50257 → 50304", "kernel align1; sm75 kernel on sm_90; leading dim C 50257")]
    assert {e["reference_pct"] for e in s.evidence} == {70.0}  # no aligned GEMM of similar size ran


def test_triton_config_evidence_on_the_h200_trace():
    """triton_matmul_tiles launches matmul_kernel with BLOCK_SIZE_M/N/K = 16, GROUP_SIZE_M = 8, 4 warps,
    3 stages on a (4096 / 16)² = 65,536-program grid (the script's arguments)."""
    path = BARE / "triton_matmul_tiles.trace.json.gz"
    if not path.exists():
        pytest.skip("sample_traces/bare/triton_matmul_tiles is not recorded in this checkout")
    e = analysed_file(path).suggestions[0].evidence[0]
    assert (e["grid"], e["tile"], e["num_warps"], e["num_stages"]) == ("[65536, 1, 1]", "16×16×16", 4, 3)
    assert e["constexprs"] == "BLOCK_SIZE_M=16, BLOCK_SIZE_N=16, BLOCK_SIZE_K=16, GROUP_SIZE_M=8"
    # 2·4096³ FLOPs per launch at 989.4 TFLOP/s (fp16 dense) = 138.9 µs against the kernels' 41,828.6 µs
    # over 6 launches (raw kernel events) = 6,971.4 µs each: 2 %
    assert e["roof"] == "fp16" and e["roof_pct"] == pytest.approx(100 * 2 * 4096**3 / 989.4e12 * 1e6 / 6971.4, rel=0.01)
