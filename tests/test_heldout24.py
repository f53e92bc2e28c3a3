"""The twenty-fourth held-out set (H200, sample_traces/heldout24/): its first run's answers against the
recordings' own unprofiled steps (docs/validation.md)."""

from __future__ import annotations

from recorded import set_tests

SET = "heldout24"
# first and within ±35 % of the bare saving at the first run (the tag's code, the same analysis code as
# this commit's): the NaN/Inf checks read on the host (drop_checks 6.17 against 5.95 ms) and the user
# Triton GEMM's float32 dot operands (triton_config 6.56 against 6.28 ms)
FIRST_AND_WITHIN = ["ho24_grid_load_nan_asserts", "ho24_triton_enhancer_fp32_dot_operands"]
test_first_suggestion_is_the_fix_and_its_saving_is_measured, test_projection_within_15_percent_of_the_bare_step = \
    set_tests(SET, FIRST_AND_WITHIN)
