"""Times every workload of the twentieth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout20/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 20 --budget 460`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho20_NAME[_VARIANT].trace.json.gz benchmarks/heldout20/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`retinanet_eager_focal_loss`, its labelled variant) is recorded last. Results:
$OUT/heldout20_runs.json and .md, logs under $OUT/logs/ (default $OUT: /tmp/out). Only the tables
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
    "ecg_resnet_loop_adamw": ("fused_adamw", None),
    "weather_pageable_batches": ("pinned_bank", None),
    "retinanet_eager_focal_loss": ("compiled_loss", None),
    "chat_decode_cat_kv_cache": ("static_cache", None),
    "triton_pointnet_no_dot": ("tl_dot", None),
    "vqvae_broadcast_distances": ("matmul_distances", None),
    "code_lm_fp32_weights_autocast": ("bf16_weights", None),
    "corpus_embed_unsorted_lengths": ("length_sorted", None),
    "int8_bert_scale_item": ("device_scales", None),
    "cifar_per_sample_augment": ("batched_gather", None),
}
COMPILES = {"retinanet_eager_focal_loss"}  # its labelled variant compiles with inductor (cold in the first plain run)
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("ecg_resnet_loop_adamw", None): (9.0, 19.5),
    ("ecg_resnet_loop_adamw", "fused_adamw"): (7.5, 18.0),
    ("weather_pageable_batches", None): (10.5, 22.5),
    ("weather_pageable_batches", "pinned_bank"): (9.0, 19.5),
    ("retinanet_eager_focal_loss", None): (10.5, 21.0),
    ("retinanet_eager_focal_loss", "compiled_loss"): (37.5, 33.0),
    ("chat_decode_cat_kv_cache", None): (10.5, 22.5),
    ("chat_decode_cat_kv_cache", "static_cache"): (9.0, 19.5),
    ("triton_pointnet_no_dot", None): (10.5, 21.0),
    ("triton_pointnet_no_dot", "tl_dot"): (10.5, 21.0),
    ("vqvae_broadcast_distances", None): (9.0, 19.5),
    ("vqvae_broadcast_distances", "matmul_distances"): (7.5, 18.0),
    ("code_lm_fp32_weights_autocast", None): (12.0, 25.5),
    ("code_lm_fp32_weights_autocast", "bf16_weights"): (10.5, 22.5),
    ("corpus_embed_unsorted_lengths", None): (9.0, 19.5),
    ("corpus_embed_unsorted_lengths", "length_sorted"): (7.5, 18.0),
    ("int8_bert_scale_item", None): (9.0, 19.5),
    ("int8_bert_scale_item", "device_scales"): (7.5, 18.0),
    ("cifar_per_sample_augment", None): (9.0, 19.5),
    ("cifar_per_sample_augment", "batched_gather"): (7.5, 18.0),
}
TABLES = driver.SetTables(set_name="heldout20", tag="ho20", title="Twentieth held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["retinanet_eager_focal_loss"], doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
