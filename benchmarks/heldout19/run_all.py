"""Times every workload of the nineteenth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout19/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 19 --budget 460`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho19_NAME[_VARIANT].trace.json.gz benchmarks/heldout19/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`diffusion_policy_step_index`) is recorded last. Results: $OUT/heldout19_runs.json and .md, logs
under $OUT/logs/ (default $OUT: /tmp/out). Only the tables below are this set's own.
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
    "patchtst_anomaly_mode": ("anomaly_off", None),
    "birdcall_cpu_melspec": ("gpu_melspec", None),
    "diffusion_policy_step_index": ("tensor_step", None),
    "pointcloud_mha_need_weights": ("need_weights_false", None),
    "triton_sinkhorn_column_stride": ("transposed_copy", None),
    "ticket_router_full_logits": ("last_position", None),
    "nowcast_unet_float64": ("float32", None),
    "histo_vit_microbatch_accum": ("full_batch", None),
    "mixer_fake_quant_serving": ("int8_mm", None),
    "ctr_per_field_embeddings": ("one_table", None),
}
COMPILES = {"diffusion_policy_step_index"}  # both rows compile with inductor (cold in the first plain run)
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("patchtst_anomaly_mode", None): (9.0, 21.0),
    ("patchtst_anomaly_mode", "anomaly_off"): (7.5, 18.0),
    ("birdcall_cpu_melspec", None): (10.5, 21.0),
    ("birdcall_cpu_melspec", "gpu_melspec"): (9.0, 19.5),
    ("diffusion_policy_step_index", None): (37.5, 39.0),
    ("diffusion_policy_step_index", "tensor_step"): (19.5, 24.0),
    ("pointcloud_mha_need_weights", None): (9.0, 19.5),
    ("pointcloud_mha_need_weights", "need_weights_false"): (7.5, 18.0),
    ("triton_sinkhorn_column_stride", None): (10.5, 21.0),
    ("triton_sinkhorn_column_stride", "transposed_copy"): (9.0, 19.5),
    ("ticket_router_full_logits", None): (9.0, 19.5),
    ("ticket_router_full_logits", "last_position"): (7.5, 18.0),
    ("nowcast_unet_float64", None): (10.5, 21.0),
    ("nowcast_unet_float64", "float32"): (9.0, 19.5),
    ("histo_vit_microbatch_accum", None): (9.0, 19.5),
    ("histo_vit_microbatch_accum", "full_batch"): (7.5, 18.0),
    ("mixer_fake_quant_serving", None): (9.0, 19.5),
    ("mixer_fake_quant_serving", "int8_mm"): (9.0, 19.5),
    ("ctr_per_field_embeddings", None): (9.0, 19.5),
    ("ctr_per_field_embeddings", "one_table"): (7.5, 18.0),
}
TABLES = driver.SetTables(set_name="heldout19", tag="ho19", title="Nineteenth held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["diffusion_policy_step_index"], doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
