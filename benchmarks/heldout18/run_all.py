"""Times every workload of the eighteenth held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout18/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 18 --budget 460`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho18_NAME[_VARIANT].trace.json.gz benchmarks/heldout18/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The one workload that compiles with
inductor (`ppo_rollout_compiled_default`) is recorded last. Results: $OUT/heldout18_runs.json and .md, logs
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
    "speech_probe_frozen_grads": ("frozen_no_grad", None),
    "ner_span_f1_per_step": ("device_counts", None),
    "ppo_rollout_compiled_default": ("reduce_overhead", None),
    "dna_lm_sdpa_tril_mask": ("is_causal", None),
    "triton_vae_groupnorm_grid": ("split_grid", None),
    "midi_gpt_per_head_linears": ("fused_qkv", None),
    "edsr_superres_nchw": ("channels_last", None),
    "reviews_pad_max_length": ("pad_to_longest", None),
    "nerf_qat_fake_quant": ("fused_fake_quant", None),
    "load_forecast_lstmcell_loop": ("cudnn_lstm", None),
}
COMPILES = {"ppo_rollout_compiled_default"}  # both rows compile with inductor (cold in the first plain run)
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("speech_probe_frozen_grads", None): (7.5, 18.0),
    ("speech_probe_frozen_grads", "frozen_no_grad"): (7.5, 18.0),
    ("ner_span_f1_per_step", None): (7.5, 18.0),
    ("ner_span_f1_per_step", "device_counts"): (7.5, 18.0),
    ("ppo_rollout_compiled_default", None): (33.0, 33.0),
    ("ppo_rollout_compiled_default", "reduce_overhead"): (37.5, 37.5),
    ("dna_lm_sdpa_tril_mask", None): (9.0, 21.0),
    ("dna_lm_sdpa_tril_mask", "is_causal"): (7.5, 18.0),
    ("triton_vae_groupnorm_grid", None): (10.5, 22.5),
    ("triton_vae_groupnorm_grid", "split_grid"): (10.5, 22.5),
    ("midi_gpt_per_head_linears", None): (9.0, 19.5),
    ("midi_gpt_per_head_linears", "fused_qkv"): (7.5, 18.0),
    ("edsr_superres_nchw", None): (9.0, 19.5),
    ("edsr_superres_nchw", "channels_last"): (7.5, 18.0),
    ("reviews_pad_max_length", None): (9.0, 19.5),
    ("reviews_pad_max_length", "pad_to_longest"): (7.5, 18.0),
    ("nerf_qat_fake_quant", None): (9.0, 19.5),
    ("nerf_qat_fake_quant", "fused_fake_quant"): (7.5, 18.0),
    ("load_forecast_lstmcell_loop", None): (9.0, 21.0),
    ("load_forecast_lstmcell_loop", "cudnn_lstm"): (7.5, 18.0),
}
TABLES = driver.SetTables(set_name="heldout18", tag="ho18", title="Eighteenth held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["ppo_rollout_compiled_default"], doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
