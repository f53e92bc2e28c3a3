"""Times every workload of the twenty-fourth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout24/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 24 --budget 500`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho24_NAME[_VARIANT].trace.json.gz benchmarks/heldout24/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`meeting_asr_graph_input_copies`, both variants) is recorded last. Results:
$OUT/heldout24_runs.json and .md, logs under $OUT/logs/ (default $OUT: /tmp/out). Only the tables
below are this set's own.
"""

import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("heldout_driver", HERE.parent / "gpu" / "heldout_driver.py")
assert _spec is not None and _spec.loader is not None
driver = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(driver)

# script -> (its labelled variant, its extra variant or None), in README.md's order
WORKLOADS: dict[str, tuple[str, str | None]] = {
    "grocery_item2vec_dense_table_grads": ("sparse_grads", None),
    "grid_load_nan_asserts": ("output_check_only", None),
    "meeting_asr_graph_input_copies": ("static_cross_kv", None),
    "recipe_writer_no_kv_cache": ("kv_cache", None),
    "triton_enhancer_fp32_dot_operands": ("bf16_dot", None),
    "legal_clause_moe_dense_experts": ("routed_experts", None),
    "music_ranking_float32_tables": ("bf16_tables", None),
    "sign_language_per_frame_cnn": ("frames_in_batch", None),
    "support_ticket_cpu_dynamic_int8": ("gpu_bf16", None),
    "hyperspectral_per_band_loop": ("broadcast_bands", None),
}
# plain runs that include a cold inductor compile: both variants of this one
COMPILES = {"meeting_asr_graph_input_copies"}
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("grocery_item2vec_dense_table_grads", None): (9.0, 19.5),
    ("grocery_item2vec_dense_table_grads", "sparse_grads"): (7.5, 18.0),
    ("grid_load_nan_asserts", None): (9.0, 19.5),
    ("grid_load_nan_asserts", "output_check_only"): (7.5, 18.0),
    ("meeting_asr_graph_input_copies", None): (45.0, 33.0),
    ("meeting_asr_graph_input_copies", "static_cross_kv"): (45.0, 33.0),
    ("recipe_writer_no_kv_cache", None): (10.5, 21.0),
    ("recipe_writer_no_kv_cache", "kv_cache"): (9.0, 19.5),
    ("triton_enhancer_fp32_dot_operands", None): (12.0, 22.5),
    ("triton_enhancer_fp32_dot_operands", "bf16_dot"): (12.0, 22.5),
    ("legal_clause_moe_dense_experts", None): (9.0, 19.5),
    ("legal_clause_moe_dense_experts", "routed_experts"): (9.0, 19.5),
    ("music_ranking_float32_tables", None): (10.5, 21.0),
    ("music_ranking_float32_tables", "bf16_tables"): (10.5, 21.0),
    ("sign_language_per_frame_cnn", None): (9.0, 19.5),
    ("sign_language_per_frame_cnn", "frames_in_batch"): (7.5, 18.0),
    ("support_ticket_cpu_dynamic_int8", None): (10.5, 22.5),
    ("support_ticket_cpu_dynamic_int8", "gpu_bf16"): (9.0, 18.0),
    ("hyperspectral_per_band_loop", None): (9.0, 21.0),
    ("hyperspectral_per_band_loop", "broadcast_bands"): (7.5, 18.0),
}
TABLES = driver.SetTables(set_name="heldout24", tag="ho24", title="Twenty-fourth held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["meeting_asr_graph_input_copies"],
                          doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
