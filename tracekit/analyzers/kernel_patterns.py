"""Kernel-name patterns as data: which library wrote a GPU kernel, and what class of work it does."""

from __future__ import annotations

from typing import NamedTuple


class Rule(NamedTuple):
    """One row of a pattern table: `name` (regex, re.search) on the kernel name -> `value`.

    `op` (regex, re.search) optionally restricts the row to kernels whose launching CPU op name
    matches; rows with `op` resolve names that are ambiguous on their own. First match wins.
    `source` says where the name shape was seen.
    """

    name: str
    value: str
    op: str | None = None
    source: str = ""


# The launching op as rules see it: its name, then up to OP_CHAIN_DEPTH aten ancestors, e.g.
# "aten::index_select < aten::embedding" (embedding calls index_select).
OP_CHAIN_SEP = " < "
OP_CHAIN_DEPTH = 3

# Rules see at most this many characters of a kernel or op name (names are untrusted input; every
# pattern here is also written to run in time linear in the name: tests/test_fuzz_patterns.py).
MAX_NAME_CHARS = 4096

# Launching-op regexes used by several rows.
_CONV_OP = r"conv|cudnn_convolution|miopen_convolution|mkldnn_convolution"
_EMBED_OP = r"embedding"
_ATTN_OP = r"attention|sdpa|flash|_efficient_attention|_cudnn_attention"

# Library: who wrote the kernel. Ordered; first match wins. Kernels with no match fall back in
# kernels.py: launched by the driver API (cuLaunchKernel*) outside aten -> 'triton', else 'other'.
LIBRARY_RULES: tuple[Rule, ...] = (
    Rule(r"nccl|rccl|msccl", "nccl", source="NCCL ncclKernel_*/ncclDevKernel_*; RCCL keeps the names"),
    Rule(r"^bmm_[A-Za-z0-9]+_[A-Za-z0-9]+_Fp32_|^fmhaSm\d+\w?Kernel_|moe::dev::|tensorrt_llm::", "trtllm",
         source="TensorRT-LLM trtllm-gen cubins shipped by flashinfer (TraceLens B200 vLLM: bmm_MxE4m3_MxE2m1MxE4m3_Fp32_* "
                "MX-FP8/FP4 GEMMs, fmhaSm100aKernel_*, moe::dev::finalize/routing, tensorrt_llm::kernels::quantize_*): "
                "launched with cuLaunchKernelEx but not Triton"),
    Rule(r"aiter::|^_ZN5aiter|^aiter_|^_?ZN\d*aiter", "aiter",
         source="AMD aiter kernels, Itanium-mangled in ROCm traces (TraceLens SGLang MI300X: _ZN5aiter24add_rmsnorm_quant_kernel*)"),
    Rule(r"sgl_hip::|sgl_kernel::|^_ZN\d+sgl_(hip|kernel)", "sgl-kernel",
         source="SGLang sgl_kernel ops (TraceLens SGLang MI300X: _ZN7sgl_hip10activation18act_and_mul_kernel*)"),
    Rule(r"^sage_(fwd|quant_kernel)", "triton",
         source="aiter.ops.triton Sage attention (@triton.jit sage_fwd*, sage_quant_kernel; TraceLens xDiT Flux.1 "
                "MI300X): replayed in a HIP graph, so no driver launch says Triton"),
    Rule(r"flash_fwd|flash_bwd|flash::|pytorch_flash|flash_attn|FlashAttn", "flash-attn",
         source="flash-attn / PyTorch's vendored flash (pytorch_flash::flash_fwd_kernel)"),
    Rule(r"^_?attn_(fwd|bwd)", "flash-attn", op=_ATTN_OP,
         source="ROCm aotriton attn_fwd under aten::_flash_attention_forward (TraceLens MI300)"),
    Rule(r"^triton_(poi|red|per|tem|for|mix|unk)_", "inductor", source="torch.compile Inductor"),
    Rule(r"cudnn|cask_|scudnn|^sm\d+_xmma_(fprop|dgrad|wgrad)|^(?=.*xmma_)(?=.*_cudnn)|implicit_convolve_sgemm|"
         r"explicit_convolve_sgemm|wgrad_alg\d_engine|dgrad_engine|dgrad2d|^(void )?fft2d_|winograd|"
         r"nchwToNhwcKernel|nhwcToNchwKernel|bn_fw_tr_|bn_bw_|bn_fw_inf",
         "cudnn", source="cuDNN (V100/A100/H100 traces, HTA and Kineto corpora)"),
    Rule(r"^nvjet_|xmma_gemm|^(ampere|volta|turing|maxwell|hopper|ada|sm\d+)_\w*(gemm|gemv)|gemv2[TN]_kernel|"
         r"gemvNSP|gemvx|gemmk1_kernel|gemmSN_|^(void )?[sdhcz]gemm_|splitKreduce_kernel|cublas|epilogue::impl::globalKernel|"
         r"(dot|scal|axpy|nrm2|asum)_kernel<",
         "cublas", source="cuBLAS / cuBLASLt: nvjet_sm90_* (H200), sm80_xmma_gemm_*, ampere_sgemm_*, gemv2T_*"),
    Rule(r"cusparse::", "cusparse", source="cuSPARSE kernels of torch.sparse products: cusparse::csrmm_alg1_kernel, "
                                           "csrmm_alg2_kernel, csr_partition_kernel (H100 heldout25 copurchase_gcn)"),
    Rule(r"cutlass|fmha_cutlass|AttentionKernel<|AttentionBackwardKernel<", "cutlass",
         source="CUTLASS kernels called by cuBLAS/PyTorch (cutlass_80_tensorop_s1688gemm_*, mem-efficient SDPA)"),
    Rule(r"^Cijk_.*_UserArgs|hipblaslt|hipblasLt", "hipblaslt",
         source="hipBLASLt Tensile kernels carry _UserArgs_ (TraceLens MI300)"),
    Rule(r"^Cijk_|rocblas|Tensile", "rocblas", source="rocBLAS Tensile Cijk_* (HTA MI250)"),
    Rule(r"MIOpen|miopen|^(igemm|naive_conv|gridwise_convolution)", "miopen", source="MIOpen (TraceLens MI300)"),
    Rule(r"ck::|ck_tile::|^_ZN\d*ck(_tile)?\d|^(void )?kernel_gemm_xdl|DeviceGemm|device_gemm", "ck",
         source="AMD composable kernel, also Itanium-mangled (TraceLens SGLang MI300X: _ZN7ck_tile6kentry*FmhaBatchPrefill*)"),
    Rule(r"vllm::", "other", source="vLLM's own CUDA ops (csrc/: vllm::fused_add_rms_norm_kernel, "
         "vllm::rotary_embedding_kernel, B200 vLLM); their c10:: template types do not make them ATen's"),
    Rule(r"at::|at_cuda_detail|c10::|cunn_|THC|kernelPointwiseApply|CatArrayBatchedCopy|"
         r"\(anonymous namespace\)::(softmax|cunn|spin_kernel)|^(void )?(elementwise_kernel|"
         r"vectorized_elementwise_kernel|unrolled_elementwise_kernel|reduce_kernel|indexSelect)",
         "aten", source="PyTorch ATen native CUDA kernels"),
    Rule(r"cub::|thrust::|DeviceRadixSort|DeviceScan|DeviceReduce|DeviceSelect|DeviceCompact|"
         r"DeviceSegmented", "cuda", source="CUB / Thrust (CUDA toolkit)"),
    Rule(r"permute_2D|permute_indices|fbgemm", "other", source="FBGEMM GPU (HTA trace_diff)"),
)

# Class: what the kernel does. Ordered; first match wins. Op-restricted rows come first so that
# ambiguous names (a GEMM kernel that cuDNN runs for a convolution) take the op's meaning.
CLASS_RULES: tuple[Rule, ...] = (
    # --- busy-waits: a sleep is a sleep under whatever op launched it -------------------------
    Rule(r"^(void )?(at::cuda::\(anonymous namespace\)::)?(spin_kernel|busy_wait_for_flag_kernel)\(", "sleep",
         source="torch.cuda._sleep(cycles) spins one thread on clock64 in ATen's at::cuda spin_kernel (HTA "
                "cuda_event_sync: at::cuda::(anonymous namespace)::spin_kernel(long); THC's was a global "
                "spin_kernel(long)); torch.cuda._busy_wait_for_flag's kernel sits beside it in ATen/cuda/Sleep.cu"),
    # --- ambiguous names decided by the launching op ---------------------------------------
    Rule(r"gemm|gemv|nvjet_|xmma|cutlass|Cijk_|fft|winograd", "conv", op=_CONV_OP,
         source="cuDNN runs GEMM/FFT kernels for convolutions (HTA alexnet ampere_gcgemm under aten::cudnn_convolution)"),
    Rule(r"indexSelect|index_select|gather|index_elementwise", "embedding", op=_EMBED_OP,
         source="aten::embedding forward is an index_select (TraceLens MI300 BERT)"),
    Rule(r"^_?attn_(fwd|bwd)", "attention", op=_ATTN_OP, source="aotriton under aten::_flash_attention_forward"),
    Rule(r"elementwise_kernel", "copy", op=r"^aten::(copy_|_to_copy|clone|contiguous)( |$)",
         source="dtype casts and contiguous copies run ATen's generic elementwise kernels"),
    Rule(r".", "reduction", op=r"^aten::(topk|sort|argsort|msort|kthvalue|median|nanmedian|mode)( |$)",
         source="top-k and sort run gather/scan/fill helpers (H200: mbtopk::gatherTopK)"),
    # --- communication (before the 'reduce' keywords) --------------------------------------
    Rule(r"nccl|rccl|msccl|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
         r"AllReduce|AllGather|ReduceScatter|SendRecv", "communication",
         source="ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_*, vLLM cross_device_reduce"),
    # --- attention ------------------------------------------------------------------------
    Rule(r"fort_native_sdpa|flash_fwd|flash_bwd|flash::|pytorch_flash|flash_attn|FlashAttn|fmha|Fmha|"
         r"FMHA|mha_fwd|mha_bwd|AttentionKernel<|AttentionBackwardKernel<|_attention|attention_|"
         r"flex_attention|^_?attn_(fwd|bwd)|paged_attention|sdpa",
         "attention", source="cudnn_generated_fort_native_sdpa_*, flash_fwd_*, fmha_cutlassF_*, paged_attention"),
    # --- Inductor kernels: the name lists the fused aten ops --------------------------------
    Rule(r"^sage_fwd", "attention",
         source="aiter.ops.triton SageAttention forward (INT8 QK, FP8 PV flash attention; TraceLens xDiT Flux.1 MI300X)"),
    Rule(r"^triton_tem_.*(flex_attention|attention|sdpa)", "attention", source="Inductor flex attention template"),
    Rule(r"^triton_tem_.*conv", "conv", source="Inductor convolution template"),
    Rule(r"^triton_tem_", "gemm", source="Inductor mm/bmm/addmm templates (triton_tem_fused_mm_0)"),
    Rule(r"^triton_\w*softmax", "softmax", source="Inductor triton_per_fused__softmax_0"),
    Rule(r"^triton_\w*(layer_norm|rms_norm|batch_norm|group_norm|native_norm|_norm_)", "normalization",
         source="Inductor triton_red_fused_native_layer_norm_0"),
    Rule(r"^triton_(red|per)_(?=\w*mean)\w*rsqrt", "normalization",
         source="Inductor RMSNorm: triton_red_fused_add_mean_mul_pow_rsqrt_0 (TraceLens torch.compile)"),
    Rule(r"^triton_\w*embedding", "embedding", source="Inductor embedding gather"),
    Rule(r"^triton_(red|per)_", "reduction", source="Inductor reductions"),
    # one way to split a name into tokens (none starts with '_', none is followed by a letter
    # where a longer one would be): no backtracking blow-up on names like triton_poi_fused_____!
    Rule(r"^triton_poi_fused(?:_+(?:to_copy|clone|cat|copy|unsafe_view|view|permute|transpose|t|expand|"
         r"slice|select|stack|constant_pad_nd|squeeze|unsqueeze))*_+\d+$", "copy",
         source="Inductor pointwise kernels made only of copies/casts/views (triton_poi_fused__to_copy_0)"),
    Rule(r"^triton_(poi|for|mix)_", "elementwise", source="Inductor pointwise / foreach kernels"),
    # --- convolution ----------------------------------------------------------------------
    Rule(r"scudnn|^sm\d+_xmma_(fprop|dgrad|wgrad)|^(?=.*xmma_)(?=.*_cudnn)|implicit_convolve_sgemm|"
         r"explicit_convolve_sgemm|wgrad_alg\d_engine|dgrad_engine|dgrad2d|^(void )?fft2d_|winograd|"
         r"cutlass_cudnn|cask_|ImplicitGemmConvolution|reduce_wgrad|im2col|col2im|conv2d|conv3d|"
         r"Conv(?!ert)|conv_|_conv(?!ert)|depthwise|igemm|naive_conv|gridwise_convolution|convolution|"
         r"cutlass__\d+x_cudnn::Kernel<cutlass_tensorop_\w*(fprop|dgrad|wgrad)",
         "conv", source="cudnn_infer_volta_scudnn_*, sm80_xmma_fprop_implicit_gemm_*, dgrad_engine, wgrad_alg0_engine; "
                        "cuDNN's CUTLASS kernels, cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_"
                        "bf16_256x64_32x4_nhwc_align8> (H100 heldout22 camera_trap, one launch outside any op)"),
    # --- GEMM libraries -------------------------------------------------------------------
    Rule(r"^nvjet_|xmma_gemm|^(ampere|volta|turing|maxwell|hopper|ada|sm\d+)_\w*(gemm|gemv)|gemv|"
         r"gemmk1_|gemmSN|splitKreduce|cublasLt|cublas|epilogue::impl::globalKernel|^Cijk_|"
         r"cutlass\w{0,256}gemm|cutlass::Kernel<cutlass_\d+_(tensorop|simt|wmma)|GemmUniversal|Gemm|(?<!fb)gemm|"
         r"matmul|Matmul|_mm_|^_?mm_|bmm|wvSplitK|LLGemm|marlin|Marlin|dot_kernel|cusparse::csrmm|cusparse::csrmv",
         "gemm", source="nvjet_sm90_*, sm80_xmma_gemm_*, ampere_sgemm_*, volta_sgemm_*, cutlass_80_tensorop_s1688gemm_*, Cijk_*; "
                        "cuSPARSE's sparse × dense products, cusparse::csrmm_alg2_kernel (H100 heldout25 copurchase_gcn)"),
    # --- normalization / softmax (before generic reduce and elementwise) ---------------------
    Rule(r"softmax|SoftMax|Softmax", "softmax", source="softmax_warp_forward, cunn_SoftMaxForward"),
    Rule(r"(^|[^a-z])reduce_kernel<", "reduction", source="at::native::reduce_kernel<...> (sum/mean/norm ops)"),
    Rule(r"layer_norm|LayerNorm|layernorm|rms_?norm|RMSNorm|RmsNorm|batch_norm|BatchNorm|batchnorm|"
         r"group_norm|GroupNorm|instance_norm|InstanceNorm|RowwiseMoments|GammaBetaBackward|"
         r"ComputeInternalGradients|ComputeFusedParams|ComputeBackwardFusedParams|GradGammaBeta|"
         r"cuApplyLayerNorm|cuApplyRMSNorm|bn_fw_|bn_bw_|_norm_kernel|norm_fwd|norm_bwd|NormFwd|NormBwd",
         "normalization", source="vectorized_layer_norm_kernel, cudnn::bn_fw_tr_1C11_kernel_NCHW, MIOpenBatchNorm*"),
    Rule(r"sinkhorn|Sinkhorn", "normalization",
         source="Sinkhorn-Knopp scaling normalizes rows and columns in turn: user Triton kernel sinkhorn_half "
                "(H100 heldout19 triton_sinkhorn_column_stride)"),
    Rule(r"^(rms|rmsn)_\w+$|^\w+_rms$", "normalization",
         source="user Triton RMSNorm kernels named by their own `rms` token (H200 heldout5: rms_rows, rms_token_tiles)"),
    # --- embedding -------------------------------------------------------------------------
    Rule(r"rotary_embedding|rotary_emb_", "elementwise",
         source="RoPE is a pointwise rotation, not a lookup: vLLM vllm::rotary_embedding_kernel (B200), its "
                "sgl_kernel copy rotary_embedding_kernel (SGLang MI300X)"),
    Rule(r"embedding|Embedding|embedding_bag|EmbeddingBag|permute_pooled_embs|bounds_check_indices|"
         r"linearize_index", "embedding", source="fbgemm split_embedding_* (HTA trace_diff), embedding_backward"),
    # --- copies, casts, layout changes, gather/scatter -----------------------------------------
    Rule(r"direct_copy_kernel|copy_device_to_device|CatArrayBatchedCopy|cat_array|CatArray|"
         r"copy_kernel|CopyKernel|_copy_|contiguous|transpose|Transpose|permute|nchwToNhwc|nhwcToNchw|"
         r"index_elementwise_kernel|indexSelect|index_select|indexFunc|index_put|IndexPut|gather|"
         r"scatter|Scatter|Gather|take_kernel|masked_scatter|recat_copy|cast_kernel|_to_copy|copy|Copy|"
         r"indexing_backward_kernel",
         "copy", source="direct_copy_kernel_cuda, CatArrayBatchedCopy, nchwToNhwcKernel, indexSelectLargeIndex; "
                        "indexing_backward_kernel: index_put_(accumulate=True), the backward of x[idx] (H100, heldout6 moe_loop)"),
    Rule(r"reshape_and_cache|store_kvcache|concat_and_cache|copy_blocks|swap_blocks", "copy",
         source="KV-cache writes scatter the new keys/values into cache pages: vLLM _C_cache_ops::reshape_and_cache_flash, "
                "SGLang store_kvcache (TraceLens SGLang MI300X)"),
    Rule(r"triu_tril|tril_kernel|triu_kernel|write_indices|repeat_interleave", "copy",
         source="triu_tril_kernel, nonzero's write_indices (H200)"),
    Rule(r"roll_cuda_kernel|flip_kernel", "copy",
         source="at::native::roll_cuda_kernel: torch.roll shifting a decode's conv state (H100 heldout13 "
                "mamba_eager_decode; in its CUDA-graph variant the replayed kernels have no op to name them)"),
    # --- reductions, scans, sorts, pooling, losses -----------------------------------------
    Rule(r"moe::dev::(finalize|routing)::", "reduction",
         source="TensorRT-LLM fused MoE (flashinfer trtllm_fused_moe_dev_kernel.cu, B200 vLLM): finalizeKernel[VecLoad] "
                "sums each token's top-k expert rows (k-way weighted reduction); routing*Kernel: per-expert histogram "
                "and offsets scan"),
    Rule(r"reduce|Reduce|reduction|Reduction|DeviceScan|DeviceRadixSort|RadixSort|radix_sort|sort|Sort|"
         r"scan|Scan|cumsum|cumprod|argmax|argmin|topk|TopK|top_k|max_pool|avg_pool|adaptive_avg|"
         r"adaptive_max|adaptive_average|average_pool|AvgPool|MaxPool|_pool|pool_|ClassNLLCriterion|nll_loss|cross_entropy|"
         r"compute_grad_weight|histogram|Histogram|unique|bincount|segment|norm_two|CompactInit|coalesceValues|"
         r"DeviceSelect|searchsorted|^_?(sum|mean|max|min|amax|amin|argmax|argmin)(_|$)|"
         r"^_?(col|row)_?(sum|mean|max|min)(_|$)",
         "reduction", source="at::native::reduce_kernel, cub::DeviceRadixSort*, max_pool_forward_nchw, cunn_ClassNLLCriterion; "
                             "user Triton colsum_kernel (H200 held-out triton_colsum); sparse COO coalesce sums the "
                             "values of duplicate indices, a segmented reduction (at::native::apply::coalesceValuesKernel, "
                             "H100 held-out gcn_sparse_dense_graph)"),
    # --- elementwise: pointwise math, fills, RNG, optimizers -----------------------------------
    Rule(r"upsample|UpSample|interpolat|grid_sampler|resize", "elementwise",
         source="upsample_nearest2d_out_frame, upsample_bilinear2d (H200)"),
    Rule(r"lstm_cell_(forward|backward)|gru_cell_(forward|backward)|LSTM_elementWise|GRU_elementWise|"
         r"RNN_elementWise|elementWise_(fp|bp)", "elementwise",
         source="the fused pointwise gates of RNN cells: ATen's lstm_cell_forward/backward (nn.LSTMCell), "
                "cuDNN's LSTM_elementWise_bp1 (nn.LSTM; H200 held-out lstm_cells)"),
    Rule(r"elementwise|Elementwise|pointwise|Pointwise|Functor|kernelPointwiseApply|multi_tensor_apply|"
         r"Adam|adam|sgd|SGD|lamb|dropout|Dropout|fill|Fill|memset|where|clamp|threshold|relu|gelu|"
         r"Gelu|GeLU|silu|Silu|swiglu|geglu|sigmoid|tanh|exp|log|sqrt|rsqrt|pow|abs|neg|add|Add|mul|"
         r"Mul|sub|div|Div|scale|Scale|bias|Bias|rope|rotary|Rotary|quant|Quant|act_and_mul|activation|"
         r"distribution|uniform|normal|bernoulli|philox|rand|compare|nan_to_num|"
         r"FP8rowwise|_FP8|fp8|to_dense|offsets_range|arange",
         "elementwise", source="vectorized_elementwise_kernel<...>, multi_tensor_apply_kernel, FillFunctor"),
)

# Launching-op name -> class, for kernels no name rule matched (custom CUDA extensions, Triton
# kernels called from an aten-like op). Ordered; first match wins.
OP_CLASS_RULES: tuple[Rule, ...] = (
    Rule(r"nccl|c10d|all_?reduce|all_?gather|reduce_?scatter|broadcast|all_?to_?all|send|recv",
         "communication"),
    Rule(r"attention|sdpa|flash", "attention"),
    Rule(r"aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|addmv|mv|dot|einsum|_int_mm)$", "gemm"),
    Rule(r"conv", "conv"),
    Rule(r"softmax", "softmax"),
    Rule(r"norm", "normalization"),
    Rule(r"embedding", "embedding"),
    Rule(r"aten::(copy_|_to_copy|to|clone|contiguous|cat|stack|index_select|gather|scatter\w*|"
         r"index\w*|_unsafe_index\w*|repeat\w*|expand\w*|flip|roll|narrow_copy|masked_select|nonzero)$",
         "copy"),
    Rule(r"aten::(sum|mean|amax|amin|max|min|argmax|argmin|cumsum|topk|sort)$|aten::(?=\w*(loss|pool))\w+$",
         "reduction"),
)

# Libraries whose name differs by platform: (platform, library) -> library.
PLATFORM_LIBRARY: dict[tuple[str, str], str] = {
    ("rocm", "nccl"): "rccl",
}

# Runtime-API names that launch user-compiled modules (Triton): kernels launched by these outside
# an aten op are user Triton kernels unless a library rule matched their name.
DRIVER_LAUNCH_RE = r"^(cuLaunchKernel(Ex)?|hipModuleLaunchKernel|hipExtModuleLaunchKernel)$"
