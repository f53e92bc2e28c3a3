"""Rules cudnn_rnn and concat_embeddings: synthetic traces with hand-computed savings (and their near
misses), and the H200 held-out pairs they were built on (ho_lstm_cells → nn.LSTM, ho_embedding_bags →
one concatenated sparse table): first on the baseline, within ±35 % of the measured unprofiled
saving, silent on the fixed trace."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest
from shared_analysis import analysed_file
from test_suggestions_kernels import _analysis
from tracebuilder import TraceBuilder

from tracekit.analyzers.detectors import recurrent
from tracekit.compare.applied import Applied, applied
from tracekit.suggestions import rules_loops
from tracekit.suggestions.rules import RULES_BY_ID

HELDOUT = Path(__file__).resolve().parents[1] / "sample_traces" / "heldout"
SGEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
CELL_FWD = "void at::native::(anonymous namespace)::lstm_cell_forward<float, float, int, 2>(TensorInfo<float, int>)"
CELL_BWD = "void at::native::(anonymous namespace)::lstm_cell_backward<float, float, int, 2>(TensorInfo<float, int>)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3> >"
F32 = "float"
B, H = 4, 64  # batch, hidden (= input) size of the synthetic cell


def _kernel(b: TraceBuilder, op: str, ts: float, dur: float, kernel: str, k_dur: float, dims: list, types: list,
            tid: int) -> None:
    """An op [ts, ts + dur) on `tid` whose launch (1 µs after its start, 1 µs long) runs `kernel` for k_dur
    µs 2 µs after the launch (the GPU idle before: a launch-bound loop)."""
    ext = b.op(op, ts, dur, tid=tid, **{"Input Dims": dims, "Input type": types})
    b.launch(ts + 1, 1, kernel, ts + 3, k_dur, ext=ext, tid=tid)


def lstm_trace(tmp_path: Path, cells: int, foreign: bool = False, kind: str = "lstm") -> Path:
    """One training step of an LSTMCell stepped `cells` times: forward on thread 100 (each cell call 35 µs
    every 40 µs from 10 µs: mm x·W_ihᵀ, mm h·W_hhᵀ, 10 µs each, and the fused gates 2 µs); a head GEMM at
    3000 µs (512 × 1024 × 4096, 100 µs); the backward on thread 200 from 5000 µs, one cell every 40 µs:
    its ThnnFusedLstmCellBackward0 node [0, 12) µs (gates 2 µs), MmBackward0 [14, 30) (two GEMMs, 10 µs
    each) and AccumulateGrad [31, 38) (an add, 3 µs). foreign: each time step also runs an output layer
    (aten::addmm, 5 µs) after the cell, in the loop (a decoder reading its last output). kind "gru": the
    same loop of nn.GRUCell's ops (gru_cell, _thnn_fused_gru_cell, ThnnFusedGruCellBackward0)."""
    title = kind.capitalize()
    b = TraceBuilder()
    mm_x = [[B, H], [H, 4 * H]]
    for t in range(cells):
        c = 10 + 40 * t
        b.op(f"aten::{kind}_cell", c, 35, tid=100, **{"Input Dims": [[B, H], [[B, H], [B, H]], [4 * H, H], [4 * H, H],
                                                                    [4 * H], [4 * H]],
                                                    "Input type": [F32, "TensorList", F32, F32, F32, F32]})
        _kernel(b, "aten::mm", c + 1, 8, SGEMM, 10, mm_x, [F32, F32], 100)
        _kernel(b, "aten::mm", c + 11, 8, SGEMM, 10, mm_x, [F32, F32], 100)
        _kernel(b, f"aten::_thnn_fused_{kind}_cell", c + 21, 8, CELL_FWD, 2, [[B, 4 * H], [B, 4 * H], [B, H]],
                [F32, F32, F32], 100)
        if foreign:
            _kernel(b, "aten::addmm", c + 36, 3, SGEMM, 5, [[H], [B, H], [H, H]], [F32, F32, F32], 100)
    _kernel(b, "aten::mm", 3000, 120, SGEMM, 100, [[512, 1024], [1024, 4096]], [F32, F32], 100)
    for j in range(cells):
        c = 5000 + 40 * j
        b.op(f"autograd::engine::evaluate_function: ThnnFused{title}CellBackward0", c, 12, tid=200)
        _kernel(b, f"aten::_thnn_fused_{kind}_cell_backward_impl", c + 1, 10, CELL_BWD, 2,
                [[B, H], [B, H], [B, H], [B, 4 * H]], [F32] * 4, 200)
        b.op("autograd::engine::evaluate_function: MmBackward0", c + 14, 16, tid=200)
        _kernel(b, "aten::mm", c + 15, 6, SGEMM, 10, [[B, 4 * H], [4 * H, H]], [F32, F32], 200)
        _kernel(b, "aten::mm", c + 22, 6, SGEMM, 10, [[4 * H, B], [B, H]], [F32, F32], 200)
        b.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", c + 31, 7, tid=200)
        _kernel(b, "aten::add_", c + 32, 5, ADD, 3, [[4 * H, H], [4 * H, H]], [F32, F32], 200)
    b.annotation("ProfilerStep#1", 0, 5000 + 40 * cells + 100)
    return b.write(tmp_path / "lstm.json")


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_cudnn_rnn_on_a_cell_loop(tmp_path, kind):
    a = _analysis(lstm_trace(tmp_path, 16, kind=kind))
    (row,) = a.ranks[0].patterns.rnn_cells.to_dict("records")
    # windows: forward [10, 10 + 15·40 + 35) = 635 µs; backward from the first cell node to the end of the
    # last one: 15·40 + 12 = 612 µs; the last cell's MmBackward0 and AccumulateGrad fall after it
    assert row[recurrent.RC_WINDOW_US] == pytest.approx(635 + 612)
    assert (row[recurrent.RC_CALLS], row[recurrent.RC_WINDOWS], row[recurrent.RC_BACKWARD]) == (16, 2, 1)
    assert (row[recurrent.RC_BATCH], row[recurrent.RC_HIDDEN]) == (B, H)
    # kernels: forward 3 × 16; backward 4 × 15 + the last cell's gates kernel
    assert row[recurrent.RC_KERNELS] == row[recurrent.RC_LAUNCHES] == 48 + 60 + 1
    gemm_us, cell_us, other_us = 32 * 10 + 30 * 10, 16 * 2 + 16 * 2, 15 * 3
    assert (row[recurrent.RC_GEMM_US], row[recurrent.RC_CELL_US], row[recurrent.RC_OTHER_US]) == (gemm_us, cell_us, other_us)
    s = RULES_BY_ID["cudnn_rnn"].run(a)
    # cuDNN: a third of the GEMM time (the recurrent products) as it is; the other two thirds of the
    # loop GEMMs' FLOPs (62 × 2·4·256·64) at the head GEMM's rate (2·512·1024·4096 FLOP in 100 µs,
    # under the H200's 67 TFLOPS fp32), the gates kernels as they are, the add gone; float32 cells, so
    # cuDNN's GEMMs on TF32 tensor cores (torch.backends.cudnn.allow_tf32's default): the GEMM time ÷
    # and the rate × the H200's TF32 / FP32 peak, 494.7 / 66.9 TFLOPS (the device table's Hopper row)
    tf32 = 494.7 / 66.9
    rate = 2 * 512 * 1024 * 4096 / 100 * tf32
    cudnn = gemm_us / 3 / tf32 + (2 / 3) * 62 * 2 * 4 * 256 * 64 / rate + cell_us
    assert s.evidence[0]["cudnn_us"] == pytest.approx(cudnn)
    assert s.saving_us == pytest.approx(635 + 612 - cudnn)  # the windows (launch-bound) − cuDNN's GPU time
    assert s.evidence[0]["calls_per_step"] == 16 and "nn.LSTM" in s.snippet and f"stepping {kind}_cell" in s.title


def test_cudnn_rnn_silent_on_two_cells(tmp_path):
    """Two cell calls per step (one decoder step of two layers): no sequence for cuDNN to run."""
    a = _analysis(lstm_trace(tmp_path, 2))
    assert a.ranks[0].patterns.rnn_cells[recurrent.RC_CALLS].tolist() == [2]
    assert rules_loops.cudnn_rnn(a) is None


def test_cudnn_rnn_silent_when_the_loop_does_more_than_the_cells(tmp_path):
    """An output layer per time step inside the loop: 15 kernels outside the cell ops in the forward window
    (the last step's comes after the last cell) for 16 calls, ≥ ½ per call: the next input may be the last
    output, which one nn.LSTM call over the sequence cannot take."""
    a = _analysis(lstm_trace(tmp_path, 16, foreign=True))
    assert a.ranks[0].patterns.rnn_cells[recurrent.RC_FOREIGN].tolist() == [15]
    assert rules_loops.cudnn_rnn(a) is None


BAG_FWD = "void at::native::(anonymous namespace)::EmbeddingBag_updateOutputKernel_sum_mean<float, long>(long const*)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1> >"
SORT = "void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<long, long>(long*)"
ACC = "void at::native::(anonymous namespace)::compute_grad_weight_bags<float, long>(long const*)"
ROWS, DIM, IDS, BAGS = 1000, 16, 64, 16


def bags_trace(tmp_path: Path, tables: int, between: int = 0) -> Path:
    """`tables` EmbeddingBags (1000 × 16, 64 ids in 16 bags each): forward on thread 100, each call 20 µs
    every 30 µs launching one 5 µs kernel; backward on thread 200 from 2000 µs, each 30 µs every 40 µs
    launching a fill (4 µs), a sort (6 µs) and the gradient accumulation (3 µs). between: that many
    other ops after each lookup, each launching a 1 µs kernel (one table used by successive requests)."""
    b = TraceBuilder()
    for f in range(tables):
        c = 10 + 30 * f
        ext = b.op("aten::embedding_bag", c, 20, tid=100, **{"Input Dims": [[ROWS, DIM], [IDS], [BAGS]],
                                                             "Input type": [F32, "long int", "long int"]})
        b.launch(c + 1, 2, BAG_FWD, c + 4, 5, ext=ext, tid=100)
        for k in range(between):
            _kernel(b, "aten::relu", c + 20.5 + 9 * k / between, 8 / between, ADD, 1, [[BAGS, DIM]], [F32], 100)
    for f in range(tables):
        c = 2000 + 40 * f
        b.op("aten::_embedding_bag_backward", c, 30, tid=200, **{
            "Input Dims": [[BAGS, DIM], [IDS], [BAGS], [IDS], [BAGS], [0]],
            "Input type": [F32, "long int", "long int", "long int", "long int", "long int"],
            "Concrete Inputs": ["", "", "", "", "", "", str(ROWS), "False", "0", "False", "", "-1"]})
        for i, (name, dur) in enumerate(((FILL, 4), (SORT, 6), (ACC, 3))):
            ext = b.op("aten::_embedding_bag_dense_backward" if i else "aten::fill_", c + 1 + 9 * i, 8, tid=200)
            b.launch(c + 2 + 9 * i, 1, name, c + 4 + 9 * i, dur, ext=ext, tid=200)
    b.annotation("ProfilerStep#1", 0, 2000 + 40 * tables + 100)
    return b.write(tmp_path / "bags.json")


def test_concat_embeddings_on_eight_tables(tmp_path):
    s = RULES_BY_ID["concat_embeddings"].run(_analysis(bags_trace(tmp_path, 8)))
    rows = {e["direction"]: e for e in s.evidence}
    # forward: 8 calls (CPU 8 × 20 µs, GPU 8 × 5 µs) → one call (20 µs CPU) whose kernel takes at least one
    # call's 5 µs, or its bytes ((64 ids + 16 bags) × 16 × 4 B + (64 + 16) × 8 B, × 8) at 4800 GB/s (0.01 µs)
    fwd_bytes = 8 * ((IDS + BAGS) * DIM * 4 + (IDS + BAGS) * 8)
    assert rows["forward"]["bytes"] == fwd_bytes and rows["forward"]["merged_us"] == pytest.approx(5)
    # backward: the dense gradient (1000 × 16 × 4 B written, the 16 × 16 grad read, 64 ids) per table;
    # one call's sequence 4 + 6 + 3 = 13 µs against 8 × 13 = 104 µs now, CPU 8 × 30 → 30 µs
    assert rows["backward"]["bytes"] == 8 * ((ROWS * DIM + BAGS * DIM) * 4 + IDS * 8)
    assert rows["backward"]["merged_us"] == pytest.approx(13) and rows["backward"]["kernels_per_step"] == 24
    assert rows["backward"]["merged_kernels"] == 3 and rows["forward"]["tables"] == 8
    assert s.saving_us == pytest.approx((160 - 20) + (240 - 30))
    assert "EmbeddingBag" in s.snippet and "8 embedding tables of width 16" in s.title


@pytest.mark.parametrize("tables", [1, 3])
def test_concat_embeddings_silent_on_few_tables(tmp_path, tables):
    """One lookup per step (a token embedding), or three: nothing worth merging (MIN_LOOKUPS = 4)."""
    a = _analysis(bags_trace(tmp_path, tables))
    assert len(a.ranks[0].patterns.embedding_lookups) == 2  # the forward and backward group are found
    assert rules_loops.concat_embeddings(a) is None


def test_concat_embeddings_silent_on_one_table_used_again_and_again(tmp_path):
    """Five other launches after each of 8 lookups (40 between the first and the last, > 4 per lookup):
    the lookups are not one layer's tables but successive uses, each followed by its own work."""
    a = _analysis(bags_trace(tmp_path, 8, between=5))
    fwd = a.ranks[0].patterns.embedding_lookups.query("direction == 'forward'")
    assert fwd["between"].tolist() == [7 * 5]  # the last lookup's five come after it
    assert rules_loops.concat_embeddings(a) is None
    assert RULES_BY_ID["concat_embeddings"].run(_analysis(bags_trace(tmp_path, 8, between=1))) is not None


def _raw(stem: str) -> dict:
    with gzip.open(HELDOUT / f"{stem}.trace.json.gz", "rt") as fh:
        return json.load(fh)


def _bare_median_us(doc: dict) -> float:
    """The median of the bare (unprofiled) steps tracekit profile stored in the file."""
    return statistics.median(float(v) for v in doc["tracekit"]["bare"]["step_us"].values())


def _events(doc: dict, cat: str, name: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat and e.get("name", "").startswith(name)]


# (before, after, rule, measured unprofiled step before and after in ms, benchmarks/heldout/RESULTS.md
# and validate_pairs.py's table: the bare runs stored in the traces)
HELD_OUT = (("ho_lstm_cells", "ho_lstm_cells_fixed", "cudnn_rnn", 58.959, 12.055),
            ("ho_embedding_bags", "ho_embedding_bags_fixed", "concat_embeddings", 9.436, 2.891))


@pytest.mark.parametrize("before, after, rule, before_ms, after_ms", HELD_OUT)
def test_held_out_pair_first_within_35_pct_silent_after(before, after, rule, before_ms, after_ms):
    if not (HELDOUT / f"{before}.trace.json.gz").exists():
        pytest.skip(f"sample_traces/heldout/{before} is not in this checkout")
    raw_b, raw_a = _raw(before), _raw(after)
    assert _bare_median_us(raw_b) / 1e3 == pytest.approx(before_ms, abs=1e-3)
    assert _bare_median_us(raw_a) / 1e3 == pytest.approx(after_ms, abs=1e-3)
    measured = _bare_median_us(raw_b) - _bare_median_us(raw_a)  # 46.904 ms and 6.544 ms
    b, a = analysed_file(HELDOUT / f"{before}.trace.json.gz"), analysed_file(HELDOUT / f"{after}.trace.json.gz")
    first = b.suggestions[0]
    assert first.id == rule  # outranks cuda_graphs (35.4 ms and 4.10 ms on these traces) by its saving
    assert first.per_step_us == pytest.approx(measured, rel=0.35)
    assert rule not in {s.id for s in a.suggestions}
    # and `tracekit diff` credits the change: the cell calls (512 aten::lstm_cell events / 4 steps → none)
    # or the lookups (104 aten::embedding_bag + 104 _embedding_bag_backward / 4 → 4 + 4 / 4) are gone
    words = {"cudnn_rnn": "RNN cell calls per step 128.0 → 0.0",
             "concat_embeddings": "embedding lookup calls per step 52.0 → 2.0"}[rule]
    assert applied(rule, b.analysis, a.analysis) == Applied(True, words)


def test_held_out_evidence_from_the_raw_events():
    if not (HELDOUT / "ho_lstm_cells.trace.json.gz").exists():
        pytest.skip("sample_traces/heldout is not in this checkout")
    steps = 4  # ProfilerSteps 2..5, the steady ones
    lstm = analysed_file(HELDOUT / "ho_lstm_cells.trace.json.gz").suggestions[0].evidence[0]
    # 2 layers × 64 time steps: 512 aten::lstm_cell events over the 4 recorded steps
    assert lstm["calls_per_step"] == len(_events(_raw("ho_lstm_cells"), "cpu_op", "aten::lstm_cell")) / steps == 128
    assert (lstm["batch"], lstm["input_size"], lstm["hidden_size"]) == (32, 1024, 1024)
    emb_doc = _raw("ho_embedding_bags")
    rows = {e["direction"]: e for e in analysed_file(HELDOUT / "ho_embedding_bags.trace.json.gz").suggestions[0].evidence}
    # 26 tables: 104 aten::embedding_bag events; their forward kernels' time, summed from the raw kernels
    assert rows["forward"]["tables"] == len(_events(emb_doc, "cpu_op", "aten::embedding_bag")) / steps == 26
    bag_us = sum(e["dur"] for e in _events(emb_doc, "kernel", "void at::native::(anonymous namespace)::EmbeddingBag_"))
    assert rows["forward"]["gpu_us"] == pytest.approx(bag_us / steps)
    assert rows["forward"]["dim"] == 64 and rows["backward"]["rows"] == 26 * 100_000


def test_concat_embeddings_silent_on_one_table_per_request():
    """ho_encoder_requests serves 48 requests per step one by one, each through the model's one
    nn.Embedding (width 512): 192 aten::embedding events over the 4 steps, each request's encoder launched
    between two of them. One table used again and again, not tables to concatenate."""
    path = HELDOUT / "ho_encoder_requests.trace.json.gz"
    if not path.exists():
        pytest.skip("sample_traces/heldout is not in this checkout")
    r = analysed_file(path)
    fwd = r.analysis.ranks[0].patterns.embedding_lookups.query("direction == 'forward'")
    calls = len(_events(_raw("ho_encoder_requests"), "cpu_op", "aten::embedding"))
    assert int(fwd["calls"].sum()) == calls == 4 * 48 and set(fwd["dim"]) == {512}
    assert (fwd["between"] > rules_loops.MAX_BETWEEN_PER_LOOKUP * fwd["calls"]).all()
    assert "concat_embeddings" not in {s.id for s in r.suggestions}
