"""elementwise_eager.py's chain under torch.compile: Inductor fuses it into one Triton kernel (triton_poi_fused_*).

Run: tracekit profile sample_traces/scripts/elementwise_compiled.py -o sample_traces/elementwise_compiled.trace.json.gz
The compile happens in the warm-up calls, before the recorded steps.
"""

import torch
from elementwise_eager import chain, main

compiled_chain = torch.compile(chain)

if __name__ == "__main__":
    main(compiled_chain)
