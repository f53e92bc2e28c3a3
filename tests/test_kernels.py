"""Kernel classification: the pattern table on known names, and classify() on synthetic traces."""

from __future__ import annotations

import re

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import kernel_patterns as kp
from tracekit.analyzers.kernels import (
    CLASS,
    CLASSES,
    LIBRARIES,
    LIBRARY,
    RULE,
    SUM_COUNT,
    SUM_KEY,
    SUM_SHARE,
    SUM_TIME,
    classify,
    classify_name,
)

# (kernel name, launching op, launch API, expected class, expected library)
NAMES = [
    # cuBLAS / cuBLASLt on H100/H200 and older GPUs
    ("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "aten::mm", "cuLaunchKernelEx", "gemm", "cublas"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "aten::addmm", "cudaLaunchKernel", "gemm", "cublas"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__51_cublas",
     "aten::mm", "cudaLaunchKernel", "gemm", "cublas"),
    ("ampere_sgemm_128x64_tn", "aten::addmm", "cudaLaunchKernel", "gemm", "cublas"),
    ("volta_sgemm_32x128_nn", "aten::mm", "cudaLaunchKernel", "gemm", "cublas"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "aten::bmm", "cudaLaunchKernel", "gemm", "cublas"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, cublasGemvParams<cublasGemvTensorStridedBatched<float const>>>",
     "aten::addmv", "cudaLaunchKernel", "gemm", "cublas"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>(cublasLt::cublasSplitKParams<float>)",
     "aten::addmm", "cudaLaunchKernel", "gemm", "cublas"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)",
     "aten::mm", "cudaLaunchKernel", "gemm", "cutlass"),
    ("void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma>",
     "aten::_scaled_mm", "cudaLaunchKernelExC", "gemm", "cutlass"),
    # the same GEMM kernel under a convolution is convolution work
    ("volta_sgemm_64x64_nt", "aten::cudnn_convolution_backward_weight", "cudaLaunchKernel", "conv", "cublas"),
    # cuDNN
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn",
     "aten::cudnn_convolution", "cudaLaunchKernel", "conv", "cudnn"),
    ("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1", "aten::cudnn_convolution", "cudaLaunchKernel", "conv", "cudnn"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct)",
     "aten::cudnn_batch_norm", "cudaLaunchKernel", "normalization", "cudnn"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0",
     "aten::_scaled_dot_product_cudnn_attention", "cudaLaunchKernelExC", "attention", "cudnn"),
    ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>)",
     "aten::cudnn_convolution", "cudaLaunchKernel", "copy", "cudnn"),
    # attention
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, true>(pytorch_flash::Flash_fwd_params)",
     "aten::_flash_attention_forward", "cudaLaunchKernel", "attention", "flash-attn"),
    ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>(Flash_fwd_params)",
     "", "cudaLaunchKernel", "attention", "flash-attn"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
     "aten::_efficient_attention_forward", "cudaLaunchKernel", "attention", "cutlass"),
    ("attn_fwd", "aten::_flash_attention_forward", "hipModuleLaunchKernel", "attention", "flash-attn"),
    # communication
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl:all_reduce",
     "cudaLaunchKernelExC", "communication", "nccl"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "record_param_comms", "cudaLaunchKernel",
     "communication", "nccl"),
    # ATen
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
     "aten::add", "cudaLaunchKernel", "elementwise", "aten"),
    ("void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>, TrivialOffsetCalculator<2, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<2>, at::native::memory::StoreWithCast<1> >",
     "aten::add_", "cudaLaunchKernel", "elementwise", "aten"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}> >",
     "aten::copy_", "cudaLaunchKernel", "copy", "aten"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >",
     "aten::_to_copy", "cudaLaunchKernel", "copy", "aten"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>(float*)",
     "aten::cat", "cudaLaunchKernel", "copy", "aten"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >",
     "aten::mean", "cudaLaunchKernel", "reduction", "aten"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >",
     "aten::linalg_vector_norm", "cudaLaunchKernel", "reduction", "aten"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*)",
     "aten::native_layer_norm", "cudaLaunchKernel", "normalization", "aten"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::batch_norm_calc_invstd(at::Tensor const&, at::Tensor const&, double)::{lambda()#1}>",
     "aten::native_batch_norm", "cudaLaunchKernel", "normalization", "aten"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, bool const*, int, bool)",
     "aten::_softmax", "cudaLaunchKernel", "softmax", "aten"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>",
     "aten::_softmax", "cudaLaunchKernel", "softmax", "aten"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>",
     "aten::embedding", "cudaLaunchKernel", "embedding", "aten"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>",
     "aten::index_select", "cudaLaunchKernel", "copy", "aten"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>",
     "aten::index_select < aten::embedding", "cudaLaunchKernel", "embedding", "aten"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::bfloat16_to_float(at::TensorIteratorBase&)::{lambda(float)#1}>",
     "aten::copy_ < aten::_to_copy < aten::to", "cudaLaunchKernel", "copy", "aten"),
    ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, float, long>",
     "aten::embedding_dense_backward", "cudaLaunchKernel", "embedding", "aten"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*)",
     "aten::max_pool2d_with_indices", "cudaLaunchKernel", "reduction", "aten"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>",
     "aten::_foreach_add_", "cudaLaunchKernel", "elementwise", "aten"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar)::{lambda()#1}>",
     "aten::clamp_min", "cudaLaunchKernel", "elementwise", "aten"),
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int, int, int>",
     "aten::sort", "cudaLaunchKernel", "reduction", "cuda"),
    ("void at::native::(anonymous namespace)::upsample_nearest2d_out_frame<float, &at::native::nearest_neighbor_compute_source_index>",
     "aten::upsample_nearest2d", "cudaLaunchKernel", "elementwise", "aten"),
    ("void at::native::triu_tril_kernel<bool, int, false, 8, false>(at::cuda::detail::TensorInfo<bool, int>)",
     "aten::tril", "cudaLaunchKernel", "copy", "aten"),
    ("void at::native::mbtopk::gatherTopK<float, unsigned int, 2>(at::cuda::detail::TensorInfo<float const, unsigned int>)",
     "aten::topk", "cudaLaunchKernel", "reduction", "aten"),
    # Inductor: the kernel name lists the fused ops
    ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0", "cuLaunchKernel", "elementwise", "inductor"),
    ("triton_per_fused__softmax_0", "triton_per_fused__softmax_0", "cuLaunchKernel", "softmax", "inductor"),
    ("triton_red_fused_native_layer_norm_1", "", "cuLaunchKernel", "normalization", "inductor"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "", "cuLaunchKernel", "normalization", "inductor"),
    ("triton_red_fused_sum_2", "", "cuLaunchKernel", "reduction", "inductor"),
    ("triton_tem_fused_mm_0", "", "cuLaunchKernel", "gemm", "inductor"),
    ("triton_poi_fused__to_copy_3", "", "cuLaunchKernel", "copy", "inductor"),
    ("triton_poi_fused_clone_permute_5", "", "cuLaunchKernel", "copy", "inductor"),
    ("triton_poi_fused_embedding_0", "", "cuLaunchKernel", "embedding", "inductor"),
    # user Triton kernels seen in traces tracekit did not record: driver launch, no aten op
    ("matmul_kernel", "", "cuLaunchKernel", "gemm", "triton"),
    ("add_kernel", "", "cuLaunchKernel", "elementwise", "triton"),
    ("colsum_kernel", "", "cuLaunchKernel", "reduction", "triton"),  # benchmarks/heldout2/triton_colsum.py
    ("_fwd_kernel_softmax", "", "cuLaunchKernel", "softmax", "triton"),
    ("_attn_fwd", "", "cuLaunchKernel", "attention", "triton"),
    ("rms_norm_fwd_kernel", "", "cuLaunchKernel", "normalization", "triton"),
    # ROCm
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x192x64_MI16x16x1_SN_LDSB1", "aten::mm",
     "hipExtModuleLaunchKernel", "gemm", "hipblaslt"),
    ("Cijk_Ailk_Bljk_SB_MT64x64x16_SN_1LDSB0_APM1_AF0EM1", "aten::addmm", "hipExtModuleLaunchKernel", "gemm",
     "rocblas"),
    ("MIOpenBatchNormFwdTrainSpatial", "aten::miopen_batch_norm", "hipLaunchKernel", "normalization", "miopen"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>>",
     "aten::mm", "hipLaunchKernel", "gemm", "ck"),
    ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0EEEvPT0_", "aiter::add_rmsnorm_quant",
     "hipLaunchKernel", "normalization", "aiter"),
    ("_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16EEvPT_", "sgl_kernel::silu_and_mul",
     "hipLaunchKernel", "elementwise", "sgl-kernel"),
    ("void (anonymous namespace)::store_kvcache<2048l, 4, false>(long const*)", "sgl_kernel::store_kvcache",
     "hipLaunchKernel", "copy", "other"),
]


@pytest.mark.parametrize(("name", "op", "api", "cls", "lib"), NAMES, ids=[n[0][:40] for n in NAMES])
def test_known_names(name, op, api, cls, lib):
    got_cls, got_lib, _ = classify_name(name, "kernel", op, api)
    assert (got_cls, got_lib) == (cls, lib)


def test_every_rule_is_valid_data():
    for table in (kp.LIBRARY_RULES, kp.CLASS_RULES, kp.OP_CLASS_RULES):
        for rule in table:
            re.compile(rule.name)
            assert rule.op is None or re.compile(rule.op)
    assert {r.value for r in kp.LIBRARY_RULES} <= set(LIBRARIES)
    assert {r.value for r in kp.CLASS_RULES} | {r.value for r in kp.OP_CLASS_RULES} <= set(CLASSES)


def test_kind_decides_memcpy_and_memset():
    assert classify_name("Memcpy HtoD (Pageable -> Device)", "memcpy")[:2] == ("memcpy", "cuda")
    assert classify_name("Memset (Device)", "memset")[:2] == ("memset", "cuda")


def test_rccl_on_rocm_and_unknown_names():
    assert classify_name("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", platform="rocm")[1] == "rccl"
    assert classify_name("my_custom_thing", "kernel", "", "cudaLaunchKernel") == ("other", "other", -1)
    # an unknown name under a known op takes the op's class
    assert classify_name("my_custom_thing", "kernel", "aten::bmm", "cudaLaunchKernel")[0] == "gemm"


def test_user_triton_metadata_decides_library_and_dot_class():
    # tracekit profile marks user Triton launches; tl.dot -> gemm whatever the name says
    assert classify_name("my_kernel", "kernel", "my_kernel", "cuLaunchKernel", user_triton=True,
                         uses_dot=True)[:2] == ("gemm", "triton")
    assert classify_name("vector_add", "kernel", "vector_add", "cuLaunchKernel",
                         user_triton=True)[:2] == ("elementwise", "triton")
    # Inductor's cpu_op carries kernel_file: inductor even for an unusual name
    assert classify_name("triton_fused_thing", "kernel", "triton_fused_thing", "cuLaunchKernel",
                         inductor=True)[1] == "inductor"


def test_classify_synthetic_trace(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    mm = b.op("aten::mm", 10, 100)
    b.launch(20, 5, "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", 50, 300, ext=mm)
    add = b.op("aten::add", 120, 20)
    b.launch(125, 5, "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
             360, 40, ext=add)
    b.launch(150, 5, "Memcpy DtoD (Device -> Device)", 410, 50, api="cudaMemcpyAsync", kind="memcpy")
    b.launch(200, 5, "mystery_kernel_xyz", 470, 10)
    trig = b.op("triton_poi_fused_mul_0", 300, 30, kernel_file="/tmp/torchinductor/ab.py", kernel_hash="ab")
    b.launch(305, 20, "triton_poi_fused_mul_0", 500, 100, ext=trig, api="cuLaunchKernel", cat="cuda_driver")
    r = tracekit.load_trace(b.write(tmp_path / "mix.json")).rank()
    kc = classify(r)
    assert len(kc.table) == len(r.gpu)
    by_name = dict(zip(r.gpu["name"], zip(kc.table[CLASS], kc.table[LIBRARY], strict=True), strict=True))
    assert by_name["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"] == ("gemm", "cublas")
    assert by_name["Memcpy DtoD (Device -> Device)"] == ("memcpy", "cuda")
    assert by_name["mystery_kernel_xyz"] == ("other", "other")
    assert by_name["triton_poi_fused_mul_0"] == ("elementwise", "inductor")
    assert kc.table[RULE].dtype.kind == "i"
    # 300 + 40 + 50 + 10 + 100 = 500 µs of GPU activity
    assert kc.total_us == pytest.approx(500.0)
    classes = kc.classes.set_index(SUM_KEY)
    assert classes.loc["gemm", SUM_TIME] == pytest.approx(300.0)
    assert classes.loc["gemm", SUM_SHARE] == pytest.approx(0.6)
    assert classes.loc["elementwise", SUM_COUNT] == 2  # the aten add and the Inductor kernel
    assert kc.other_share == pytest.approx(10.0 / 500.0)
    assert kc.classes[SUM_KEY].iloc[0] == "gemm"  # sorted by time
    libs = kc.libraries.set_index(SUM_KEY)
    assert libs.loc["inductor", SUM_TIME] == pytest.approx(100.0)
    assert kc.to_dict()["classes"][0] == {"class": "gemm", "time_us": 300.0, "count": 1, "share": 0.6}


def test_classify_empty_gpu(tmp_path):
    b = TraceBuilder()
    b.op("aten::add", 0, 10)
    kc = classify(tracekit.load_trace(b.write(tmp_path / "cpu.json")).rank())
    assert len(kc.table) == 0 and kc.total_us == 0.0 and kc.other_share == 0.0


def test_user_triton_launch_recorded_by_tracekit(tmp_path):
    """`tracekit profile` wraps user Triton launches in a cpu_op with tracekit_user_kernel=N; entry
    N-1 of the trace's tracekit.triton_kernels table may say the kernel calls tl.dot."""
    b = TraceBuilder()
    b.top["tracekit"] = {"triton_kernels": [{"name": "fused_thing", "uses_dot": True},
                                            {"name": "fused_other"}]}
    first = b.op("fused_thing", 0, 50, kernel_backend="triton", tracekit_user_kernel=1, num_warps=4)
    b.launch(5, 10, "fused_thing", 60, 20, ext=first, api="cuLaunchKernel", cat="cuda_driver")
    second = b.op("fused_other", 100, 50, kernel_backend="triton", tracekit_user_kernel=2, num_warps=4)
    b.launch(105, 10, "fused_other", 160, 20, ext=second, api="cuLaunchKernel", cat="cuda_driver")
    r = tracekit.load_trace(b.write(tmp_path / "triton.json")).rank()
    kc = classify(r)
    assert list(zip(kc.table[CLASS], kc.table[LIBRARY], strict=True)) == [("gemm", "triton"),
                                                                        ("other", "triton")]
