"""train_optimizer_loop.py's model and step with AdamW(fused=True): one fused kernel updates a whole
group of parameter tensors (weights, moments, step counts), a few launches instead of ~2,400.

Run: tracekit profile --warmup 1 sample_traces/scripts/train_optimizer_fused.py
The "after" of the fused-optimizer rule.
"""

from train_optimizer_loop import main

if __name__ == "__main__":
    main(fused=True)
