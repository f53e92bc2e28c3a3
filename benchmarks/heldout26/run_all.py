"""Times every twenty-sixth held-out workload and variant unprofiled, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout26/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 26 --budget 400`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho26_NAME[_VARIANT].trace.json.gz benchmarks/heldout26/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`short_video_sasrec_uncompiled_loss`, both variants) is recorded last. Results:
$OUT/heldout26_runs.json and .md, logs under $OUT/logs/ (default $OUT: /tmp/out). Only the tables
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
    "rooftop_solar_unet_empty_cache": ("keep_allocator_cache", None),
    "patent_search_host_topk": ("device_topk", None),
    "short_video_sasrec_uncompiled_loss": ("loss_in_graph", None),
    "math_tutor_full_cache_attention": ("filled_prefix_only", None),
    "triton_smiles_rmsnorm_atomic_grads": ("partial_sum_grads", None),
    "air_quality_chebyshev_adjacency_powers": ("recurse_on_signal", None),
    "citation_sage_feature_major_gather": ("node_major_rows", None),
    "food_delivery_ranker_tiled_user_tower": ("user_tower_once", None),
    "code_completion_dequantized_int4_decode": ("int4_tinygemm", None),
    "protein_mlm_expert_loop": ("batched_experts", None),
}
# plain runs that include a cold inductor compile: both variants of this one
COMPILES = {"short_video_sasrec_uncompiled_loss"}
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("rooftop_solar_unet_empty_cache", None): (9.0, 18.0),
    ("rooftop_solar_unet_empty_cache", "keep_allocator_cache"): (9.0, 18.0),
    ("patent_search_host_topk", None): (7.5, 16.5),
    ("patent_search_host_topk", "device_topk"): (7.5, 15.0),
    ("short_video_sasrec_uncompiled_loss", None): (27.0, 22.5),
    ("short_video_sasrec_uncompiled_loss", "loss_in_graph"): (27.0, 22.5),
    ("math_tutor_full_cache_attention", None): (9.0, 19.5),
    ("math_tutor_full_cache_attention", "filled_prefix_only"): (7.5, 16.5),
    ("triton_smiles_rmsnorm_atomic_grads", None): (12.0, 18.0),
    ("triton_smiles_rmsnorm_atomic_grads", "partial_sum_grads"): (12.0, 18.0),
    ("air_quality_chebyshev_adjacency_powers", None): (7.5, 16.5),
    ("air_quality_chebyshev_adjacency_powers", "recurse_on_signal"): (7.5, 16.5),
    ("citation_sage_feature_major_gather", None): (9.0, 18.0),
    ("citation_sage_feature_major_gather", "node_major_rows"): (9.0, 18.0),
    ("food_delivery_ranker_tiled_user_tower", None): (7.5, 16.5),
    ("food_delivery_ranker_tiled_user_tower", "user_tower_once"): (7.5, 15.0),
    ("code_completion_dequantized_int4_decode", None): (9.0, 18.0),
    ("code_completion_dequantized_int4_decode", "int4_tinygemm"): (9.0, 18.0),
    ("protein_mlm_expert_loop", None): (7.5, 18.0),
    ("protein_mlm_expert_loop", "batched_experts"): (7.5, 16.5),
}
TABLES = driver.SetTables(set_name="heldout26", tag="ho26", title="Twenty-sixth held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["short_video_sasrec_uncompiled_loss"],
                          doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
