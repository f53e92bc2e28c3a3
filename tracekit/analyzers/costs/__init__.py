"""FLOPs and bytes of GPU work: argument parsing (op_args), per-op models behind one signature
(models: the registry op name -> model; models_matmul, models_nn, models_pointwise), and the
attribution of each op call's cost to its kernels (attribution: estimate_costs -> KernelCosts)."""
