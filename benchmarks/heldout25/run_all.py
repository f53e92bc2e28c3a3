"""Times every twenty-fifth held-out workload and variant unprofiled, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout25/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 25 --budget 400`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho25_NAME[_VARIANT].trace.json.gz benchmarks/heldout25/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`traffic_rollout_compiled_inplace_norm`, both variants) is recorded last. Results:
$OUT/heldout25_runs.json and .md, logs under $OUT/logs/ (default $OUT: /tmp/out). Only the tables
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
    "histology_probe_recomputed_backbone": ("cached_features", None),
    "card_fraud_scoring_grad_recording": ("inference_mode", None),
    "traffic_rollout_compiled_inplace_norm": ("out_of_place_norm", None),
    "claims_triage_shared_prefix": ("prefix_cache", None),
    "triton_cell_atlas_single_stage": ("pipelined_stages", None),
    "jet_tagging_expanded_weight_bmm": ("flat_matmul", None),
    "copurchase_gcn_uncoalesced_coo": ("csr_adjacency", None),
    "npc_dialogue_static_batches": ("continuous_batching", None),
    "catalog_embedding_int4_tinygemm": ("dequantized_bf16", None),
    "turbine_scada_rolling_window_loop": ("unfold_windows", None),
}
# plain runs that include a cold inductor compile: both variants of this one
COMPILES = {"traffic_rollout_compiled_inplace_norm"}
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("histology_probe_recomputed_backbone", None): (7.5, 16.5),
    ("histology_probe_recomputed_backbone", "cached_features"): (7.5, 16.5),
    ("card_fraud_scoring_grad_recording", None): (6.0, 15.0),
    ("card_fraud_scoring_grad_recording", "inference_mode"): (6.0, 15.0),
    ("traffic_rollout_compiled_inplace_norm", None): (27.0, 24.0),
    ("traffic_rollout_compiled_inplace_norm", "out_of_place_norm"): (27.0, 24.0),
    ("claims_triage_shared_prefix", None): (7.5, 16.5),
    ("claims_triage_shared_prefix", "prefix_cache"): (7.5, 16.5),
    ("triton_cell_atlas_single_stage", None): (10.5, 18.0),
    ("triton_cell_atlas_single_stage", "pipelined_stages"): (10.5, 18.0),
    ("jet_tagging_expanded_weight_bmm", None): (7.5, 16.5),
    ("jet_tagging_expanded_weight_bmm", "flat_matmul"): (7.5, 16.5),
    ("copurchase_gcn_uncoalesced_coo", None): (7.5, 16.5),
    ("copurchase_gcn_uncoalesced_coo", "csr_adjacency"): (7.5, 16.5),
    ("npc_dialogue_static_batches", None): (7.5, 22.5),
    ("npc_dialogue_static_batches", "continuous_batching"): (7.5, 19.5),
    ("catalog_embedding_int4_tinygemm", None): (7.5, 16.5),
    ("catalog_embedding_int4_tinygemm", "dequantized_bf16"): (7.5, 16.5),
    ("turbine_scada_rolling_window_loop", None): (7.5, 16.5),
    ("turbine_scada_rolling_window_loop", "unfold_windows"): (6.0, 15.0),
}
TABLES = driver.SetTables(set_name="heldout25", tag="ho25", title="Twenty-fifth held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["traffic_rollout_compiled_inplace_norm"],
                          doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
