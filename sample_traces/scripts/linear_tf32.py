"""linear_fp32.py with TF32 ON (torch.backends.cuda.matmul.allow_tf32 = True): same fp32 tensors, tensor cores.

Run: tracekit profile sample_traces/scripts/linear_tf32.py -o sample_traces/linear_tf32.trace.json.gz
The "after" of the lower-precision rule.
"""

from linear_fp32 import main

if __name__ == "__main__":
    main(tf32=True)
