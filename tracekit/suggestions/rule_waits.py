"""Which suggestions wait for which: a suggestion held back while another fires, because its change does not pay (or cannot be made) until that one is made."""

from __future__ import annotations

# A suggestion held back while another one fires: its change does not pay (or cannot be made) until
# that one is made. cuda_graphs waits for graph_breaks: a CUDA graph cannot span a torch.compile graph
# break (mode="reduce-overhead" captures each compiled region; the `.item()` sync, the eager code and
# the guard checks between them stay). On the H200 pair compile_graph_breaks (sample_traces/bare/)
# removing the breaks was the measured fix; once made, cuda_graphs fires on the fixed trace.
# quantize_weights waits for convert_weights_once: weights already int8 (dequantised every call) are
# quantized; what is left is to stop converting them per call (ho4_int8_dequant: quantize_weights
# priced the bf16 copy's GEMVs of weights stored in int8).
# cuda_graphs also waits for launch_blocking: CUDA_LAUNCH_BLOCKING=1 is a debugging setting whose
# synchronous launches inflate the launch path a graph would remove; turning it off is the change
# (H200, ho5_launch_blocking: measured 29.3 -> 18.0 ms unprofiled with the setting off; cuda_graphs
# then fires on the fixed trace with its own saving).
# cuda_graphs and fuse_elementwise wait for drop_checks: a check read on the host syncs, which stream
# capture forbids, and torch.compile breaks the graph at each (a resume and guards per check, fusion
# only between checks); the checks go first (ho11 dist_validate, H100: 160 checks a step, 7.6 ms of
# fusion predicted; turning validation off was the measured fix, 24.6 -> 17.4 ms).
# They wait for calibration_off alike: a calibrator reads its input's range on the host (ho14
# fp8_calibrator_on: 3 syncs per calibrator).
WAITS_FOR: dict[str, tuple[str, ...]] = {"cuda_graphs": ("graph_breaks", "launch_blocking", "drop_checks",
                                                         "calibration_off"),
                                         # more workers or a preprocessing thread do not stop a new
                                         # iterator forking its workers every step
                                         "dataloader_workers": ("reuse_dataloader",),
                                         "preprocess_off_thread": ("reuse_dataloader",),
                                         "quantize_weights": ("convert_weights_once",),
                                         # the breaks', the checks' and the calibrators' reads are
                                         # theirs: their changes take the syncs away (compile_graph_breaks:
                                         # 6 `.item()` a step at the breaks; ho14 fp8_calibrator_on: the
                                         # range reads of calibrators calibration_off's detector did not mark)
                                         "avoid_sync": ("graph_breaks", "drop_checks", "calibration_off"),
                                         # a compiled model recompiling, or run eagerly once Dynamo gave
                                         # up: the guard is the fix, not compiling (ho15 dino_counter_recompile)
                                         "fuse_elementwise": ("drop_checks", "calibration_off", "recompiles"),
                                         # a KV cache runs one position per token after the prefill: the
                                         # logits of the others are gone with it (heldout5 no_kv_cache)
                                         "last_logits": ("use_kv_cache",)}

# cuda_graphs and fuse_elementwise also wait for avoid_sync when its syncs are round trips, values read
# back and passed straight to the next op as Python numbers, many times a step (rules_host.
# reads_split_step): a graph would freeze each value and torch.compile breaks at each (held-out
# int8_bert_scale_item, H100: a `.tolist()` of two scales per Linear, 144 a step; cuda_graphs priced
# 14.0 ms between the reads; keeping the scales on the device was the measured fix, 34.2 -> 27.5 ms
# unprofiled). A convergence check's `.item()` is no round trip: the iterations between two checks
# can be captured (held-out sinkhorn_check: 100 checks a step, cuda_graphs the measured fix).
WAIT_FOR_READS = frozenset(("cuda_graphs", "fuse_elementwise"))
