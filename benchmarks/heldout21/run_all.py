"""Times every workload of the twenty-first held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout21/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 21 --budget 460`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho21_NAME[_VARIANT].trace.json.gz benchmarks/heldout21/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`codec_lm_cpu_position`, both variants) is recorded last. Results:
$OUT/heldout21_runs.json and .md, logs under $OUT/logs/ (default $OUT: /tmp/out). Only the tables
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
    "scrna_autoencoder_zero_grad": ("grads_to_none", None),
    "imu_activity_tensor_from_list": ("stack_numpy", None),
    "codec_lm_cpu_position": ("device_position", None),
    "dna_encoder_fp32_attention": ("bf16_flash", None),
    "triton_retrieval_softmax_passes": ("fused_softmax", None),
    "lora_merged_delta": ("factored_lora", None),
    "nerf_mlp_fp32_highest": ("tf32_matmul", None),
    "dit_cfg_two_passes": ("batched_cfg", None),
    "int8_ranker_requantize_weights": ("quantize_once", None),
    "segmentation_per_class_iou_loop": ("confusion_matrix", None),
}
COMPILES = {"codec_lm_cpu_position"}  # both variants compile with inductor (cold in each first plain run)
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("scrna_autoencoder_zero_grad", None): (10.5, 22.5),
    ("scrna_autoencoder_zero_grad", "grads_to_none"): (10.5, 21.0),
    ("imu_activity_tensor_from_list", None): (9.0, 19.5),
    ("imu_activity_tensor_from_list", "stack_numpy"): (7.5, 18.0),
    ("codec_lm_cpu_position", None): (37.5, 33.0),
    ("codec_lm_cpu_position", "device_position"): (37.5, 33.0),
    ("dna_encoder_fp32_attention", None): (9.0, 19.5),
    ("dna_encoder_fp32_attention", "bf16_flash"): (7.5, 18.0),
    ("triton_retrieval_softmax_passes", None): (10.5, 21.0),
    ("triton_retrieval_softmax_passes", "fused_softmax"): (9.0, 19.5),
    ("lora_merged_delta", None): (9.0, 19.5),
    ("lora_merged_delta", "factored_lora"): (7.5, 18.0),
    ("nerf_mlp_fp32_highest", None): (9.0, 21.0),
    ("nerf_mlp_fp32_highest", "tf32_matmul"): (7.5, 18.0),
    ("dit_cfg_two_passes", None): (9.0, 21.0),
    ("dit_cfg_two_passes", "batched_cfg"): (7.5, 18.0),
    ("int8_ranker_requantize_weights", None): (9.0, 19.5),
    ("int8_ranker_requantize_weights", "quantize_once"): (7.5, 18.0),
    ("segmentation_per_class_iou_loop", None): (9.0, 19.5),
    ("segmentation_per_class_iou_loop", "confusion_matrix"): (7.5, 18.0),
}
TABLES = driver.SetTables(set_name="heldout21", tag="ho21", title="Twenty-first held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["codec_lm_cpu_position"], doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
