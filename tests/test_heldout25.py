"""The twenty-fifth held-out set (H100, sample_traces/heldout25/): its first run's answers against the
recordings' own unprofiled steps (docs/validation.md)."""

from __future__ import annotations

from recorded import set_tests

SET = "heldout25"
# first and within ±35 % of the bare saving at the first run (the tag's code, the same analysis code as
# this commit's): int4 tinygemm kernels on 16,384-row GEMMs (int4_large_batch 81.72 against 84.02 ms) and a
# Python loop over rolling-window positions (batch_samples 22.03 against 23.75 ms)
FIRST_AND_WITHIN = ["ho25_catalog_embedding_int4_tinygemm", "ho25_turbine_scada_rolling_window_loop"]
test_first_suggestion_is_the_fix_and_its_saving_is_measured, test_projection_within_15_percent_of_the_bare_step = \
    set_tests(SET, FIRST_AND_WITHIN)
