"""Times every workload of the seventeenth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout17/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 17 --budget 470`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho17_NAME[_VARIANT].trace.json.gz benchmarks/heldout17/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`t5_encoder_inf_guard`) is recorded last. Results: $OUT/heldout17_runs.json and .md, logs
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
    "ddpm_unet_ema_loop": ("foreach_ema", None),
    "t5_encoder_inf_guard": ("branchless_guard", None),
    "dit_latent_manual_attn": ("sdpa", None),
    "triton_lm_ce_block": ("wide_block", None),
    "sasrec_catalog_plus_one": ("padded_catalog", None),
    "esm_mlm_fp32": ("bf16_autocast", None),
    "plant_photos_loader": ("worker_loader", None),
    "reid_per_detection": ("batched_crops", None),
    "int8_chat_decode_dequant": ("int8_mm", None),
    "mpc_dynamics_rollout": ("cuda_graph", None),
}
COMPILES = {"t5_encoder_inf_guard"}  # both rows compile with inductor (cold in the first plain run)
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("ddpm_unet_ema_loop", None): (7.5, 18.0),
    ("ddpm_unet_ema_loop", "foreach_ema"): (7.5, 18.0),
    ("t5_encoder_inf_guard", None): (22.5, 30.0),
    ("t5_encoder_inf_guard", "branchless_guard"): (30.0, 33.0),
    ("dit_latent_manual_attn", None): (9.0, 19.5),
    ("dit_latent_manual_attn", "sdpa"): (7.5, 18.0),
    ("triton_lm_ce_block", None): (9.0, 21.0),
    ("triton_lm_ce_block", "wide_block"): (9.0, 21.0),
    ("sasrec_catalog_plus_one", None): (9.0, 19.5),
    ("sasrec_catalog_plus_one", "padded_catalog"): (7.5, 18.0),
    ("esm_mlm_fp32", None): (9.0, 19.5),
    ("esm_mlm_fp32", "bf16_autocast"): (7.5, 18.0),
    ("plant_photos_loader", None): (10.5, 24.0),
    ("plant_photos_loader", "worker_loader"): (10.5, 24.0),
    ("reid_per_detection", None): (9.0, 19.5),
    ("reid_per_detection", "batched_crops"): (7.5, 18.0),
    ("int8_chat_decode_dequant", None): (12.0, 27.0),
    ("int8_chat_decode_dequant", "int8_mm"): (10.5, 24.0),
    ("mpc_dynamics_rollout", None): (7.5, 18.0),
    ("mpc_dynamics_rollout", "cuda_graph"): (7.5, 18.0),
}
TABLES = driver.SetTables(set_name="heldout17", tag="ho17", title="Seventeenth held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["t5_encoder_inf_guard"], doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
