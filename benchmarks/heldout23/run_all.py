"""Times every workload of the twenty-third held-out set and each variant without a profiler, then records each under `tracekit profile`.

Run on the GPU machine from the repo root, in one device call: python3 benchmarks/heldout23/run_all.py [--budget S]
(or `bash benchmarks/gpu/heldout_call.sh 23 --budget 470`). The scheduling is the shared driver's,
`benchmarks/gpu/heldout_driver.py` (the fifteenth and sixteenth sets' behaviour): phase 1 plain runs
of 12 steps of every baseline and labelled variant, then the extra variants if they leave room for
every recording; phase 2 records, workload by workload, the baseline and its labelled variant with
`python -m tracekit profile --warmup 2 --active 4 --no-report --force -o
$OUT/ho23_NAME[_VARIANT].trace.json.gz benchmarks/heldout23/NAME.py [--variant V] --steps 8`, a pair
only if it is expected to fit in what is left of --budget. The two workloads that compile with
inductor (`trajectory_compiled_helpers`, both variants; `search_encoder_int8_eager_quant`, its labelled
variant) are recorded last. Results: $OUT/heldout23_runs.json and .md, logs under $OUT/logs/ (default
$OUT: /tmp/out). Only the tables below are this set's own.
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
    "protein_multitask_three_backwards": ("one_backward", None),
    "commit_lm_cpu_kv_cache": ("device_alloc", None),
    "trajectory_compiled_helpers": ("compile_whole_model", None),
    "rag_decoder_repeat_kv": ("grouped_queries", None),
    "triton_midi_causal_all_blocks": ("causal_block_skip", None),
    "microscopy_denoiser_unfold_conv": ("cudnn_conv2d", None),
    "ocean_particles_aos_columns": ("soa_layout", None),
    "ehr_dpsgd_per_sample_loop": ("vmap_grads", None),
    "search_encoder_int8_eager_quant": ("compiled_qlinear", None),
    "robot_dqn_replay_per_transition": ("batched_insert", None),
}
# plain runs that include a cold inductor compile: both variants of the first, the labelled variant of the second
COMPILES = {"trajectory_compiled_helpers", "search_encoder_int8_eager_quant"}
# expected seconds of each row: (plain run of 12 steps, recording of 8 steps: a bare run and the
# profiled run): README.md's "Device time" estimates x 1.5.
EXPECTS: dict[tuple[str, str | None], tuple[float, float]] = {
    ("protein_multitask_three_backwards", None): (9.0, 21.0),
    ("protein_multitask_three_backwards", "one_backward"): (7.5, 18.0),
    ("commit_lm_cpu_kv_cache", None): (9.0, 21.0),
    ("commit_lm_cpu_kv_cache", "device_alloc"): (7.5, 18.0),
    ("trajectory_compiled_helpers", None): (22.5, 27.0),
    ("trajectory_compiled_helpers", "compile_whole_model"): (33.0, 30.0),
    ("rag_decoder_repeat_kv", None): (10.5, 22.5),
    ("rag_decoder_repeat_kv", "grouped_queries"): (9.0, 19.5),
    ("triton_midi_causal_all_blocks", None): (10.5, 21.0),
    ("triton_midi_causal_all_blocks", "causal_block_skip"): (10.5, 21.0),
    ("microscopy_denoiser_unfold_conv", None): (9.0, 19.5),
    ("microscopy_denoiser_unfold_conv", "cudnn_conv2d"): (7.5, 18.0),
    ("ocean_particles_aos_columns", None): (9.0, 19.5),
    ("ocean_particles_aos_columns", "soa_layout"): (7.5, 18.0),
    ("ehr_dpsgd_per_sample_loop", None): (9.0, 21.0),
    ("ehr_dpsgd_per_sample_loop", "vmap_grads"): (7.5, 18.0),
    ("search_encoder_int8_eager_quant", None): (9.0, 19.5),
    ("search_encoder_int8_eager_quant", "compiled_qlinear"): (22.5, 24.0),
    ("robot_dqn_replay_per_transition", None): (9.0, 21.0),
    ("robot_dqn_replay_per_transition", "batched_insert"): (7.5, 18.0),
}
TABLES = driver.SetTables(set_name="heldout23", tag="ho23", title="Twenty-third held-out set", here=HERE,
                          workloads=WORKLOADS, expects=EXPECTS, compiles=COMPILES,
                          record_last=["search_encoder_int8_eager_quant", "trajectory_compiled_helpers"],
                          doc=__doc__ or "")

if __name__ == "__main__":
    driver.main(TABLES)
