"""Times every workload of the twenty-second held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout22/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 22 --budget 460`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho22_NAME[_VARIANT].trace.json.gz benchmarks/heldout22/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`smiles_cudagraph_every_shape`, both variants) is recorded last. Results:
$OUT/heldout22_runs.json and .md, logs under $OUT/logs/ (default $OUT: /tmp/out). Only the tables
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
    "food_vit_grad_checkpointing": ("no_checkpointing", None),
    "review_sentiment_gc_collect": ("no_gc_collect", None),
    "smiles_cudagraph_every_shape": ("bucketed_shapes", None),
    "asr_decoder_cross_kv_recompute": ("cached_cross_kv", None),
    "triton_softcap_head_row_order": ("grouped_order", None),
    "ngram_classifier_dense_counts": ("embedding_bag", None),
    "camera_trap_float32_pixels": ("uint8_transfer", None),
    "dynamics_ensemble_member_loop": ("stacked_ensemble", None),
    "ctr_int8_tables_full_dequant": ("dequant_after_gather", None),
    "ner_word_pooling_loop": ("index_add_pooling", None),
}
COMPILES = {"smiles_cudagraph_every_shape"}  # both variants compile with inductor (cold in each first plain run)
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("food_vit_grad_checkpointing", None): (9.0, 19.5),
    ("food_vit_grad_checkpointing", "no_checkpointing"): (7.5, 18.0),
    ("review_sentiment_gc_collect", None): (9.0, 21.0),
    ("review_sentiment_gc_collect", "no_gc_collect"): (7.5, 18.0),
    ("smiles_cudagraph_every_shape", None): (33.0, 30.0),
    ("smiles_cudagraph_every_shape", "bucketed_shapes"): (33.0, 30.0),
    ("asr_decoder_cross_kv_recompute", None): (10.5, 21.0),
    ("asr_decoder_cross_kv_recompute", "cached_cross_kv"): (9.0, 19.5),
    ("triton_softcap_head_row_order", None): (10.5, 21.0),
    ("triton_softcap_head_row_order", "grouped_order"): (10.5, 21.0),
    ("ngram_classifier_dense_counts", None): (9.0, 19.5),
    ("ngram_classifier_dense_counts", "embedding_bag"): (7.5, 18.0),
    ("camera_trap_float32_pixels", None): (10.5, 21.0),
    ("camera_trap_float32_pixels", "uint8_transfer"): (9.0, 19.5),
    ("dynamics_ensemble_member_loop", None): (9.0, 19.5),
    ("dynamics_ensemble_member_loop", "stacked_ensemble"): (7.5, 18.0),
    ("ctr_int8_tables_full_dequant", None): (9.0, 19.5),
    ("ctr_int8_tables_full_dequant", "dequant_after_gather"): (7.5, 18.0),
    ("ner_word_pooling_loop", None): (9.0, 19.5),
    ("ner_word_pooling_loop", "index_add_pooling"): (7.5, 18.0),
}
TABLES = driver.SetTables(set_name="heldout22", tag="ho22", title="Twenty-second held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["smiles_cudagraph_every_shape"], doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
