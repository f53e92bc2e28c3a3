"""estimate_costs on tiny synthetic traces: which kernel of an op call gets the op's cost."""

from __future__ import annotations

import math

import numpy as np
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers.costs.attribution import (
    BYTES,
    DTYPE,
    FLOPS,
    OP,
    ROLE,
    ROLE_HELPER,
    ROLE_MAIN,
    ROLE_NONE,
    ROLE_TRANSFER,
    SHAPES,
    SOURCE,
    estimate_costs,
)
from tracekit.analyzers.kernels import classify

BF16 = "c10::BFloat16"
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"
SPLITK = ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, "
          "false, false>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*)")
FOREACH = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
           "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
           "std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, "
           "at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)")
CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<at::native::(anonymous namespace)::"
       "OpaqueType<2>, unsigned int, 2, 128, 1, 16, 8>(char*, at::native::(anonymous namespace)::"
       "CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2>, unsigned int, 128, 1>, "
       "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)")


def _shapes(dims, types, concrete=None):
    args = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return args


def _trace(tmp_path):
    b = TraceBuilder()
    # addmm 4096^3 bf16: memset + GEMM + split-K reduce; the GEMM gets the 137.4 GFLOP
    mm = b.op("aten::addmm", 0, 100, **_shapes([[4096], [4096, 4096], [4096, 4096], [], []],
                                               [BF16, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "1", "1"]))
    b.launch(10, 2, "Memset (Device)", 200, 1, ext=mm, api="cudaMemsetAsync", kind="memset", bytes=512)
    b.launch(20, 5, GEMM, 210, 200, ext=mm, api="cuLaunchKernelEx", cat="cuda_driver")
    b.launch(30, 5, SPLITK, 420, 10, ext=mm)
    # _foreach_add_ over [128, 128] and [128] fp32 in two kernel launches of 30 and 10 µs
    fe = b.op("aten::_foreach_add_", 110, 40, **_shapes(
        [[[128, 128], [128]], [[128, 128], [128]], []], ["TensorList", "TensorList", "Scalar"]))
    b.launch(115, 5, FOREACH, 440, 30, ext=fe)
    b.launch(125, 5, FOREACH, 480, 10, ext=fe)
    # cat of two [1024, 64] half tensors: dtype from the kernel name (OpaqueType<2>)
    cat = b.op("aten::cat", 160, 20, **_shapes([[[1024, 64], [1024, 64]], []], ["TensorList", "Scalar"]))
    b.launch(165, 5, CAT, 500, 8, ext=cat)
    # an op without a model, and a kernel launched outside any op
    odd = b.op("aten::nonzero", 190, 20, **_shapes([[1000]], ["float"]))
    b.launch(195, 5, "void at::native::nonzero_kernel<float>(float*)", 510, 4, ext=odd)
    b.launch(220, 5, "mystery_kernel", 520, 6)
    b.launch(230, 5, "Memcpy HtoD (Pageable -> Device)", 530, 20, api="cudaMemcpyAsync", kind="memcpy",
             bytes=1 << 20)
    return tracekit.load_trace(b.write(tmp_path / "costs.json")).rank()


def test_gemm_gets_the_flops_helpers_get_nothing(tmp_path):
    rank = _trace(tmp_path)
    costs = estimate_costs(rank, classify(rank))
    t = costs.table
    assert len(t) == len(rank.gpu)
    name = rank.gpu["name"]
    gemm = t[name == GEMM].iloc[0]
    assert gemm[FLOPS] == 2 * 4096**3
    assert gemm[BYTES] == 2 * (4096 + 3 * 4096 * 4096)
    assert gemm[ROLE] == ROLE_MAIN and gemm[DTYPE] == "bf16" and gemm[OP] == "aten::addmm"
    assert gemm[SHAPES] == ((4096,), (4096, 4096), (4096, 4096))
    splitk = t[name == SPLITK].iloc[0]
    assert splitk[ROLE] == ROLE_HELPER and math.isnan(splitk[FLOPS]) and math.isnan(splitk[BYTES])
    memset = t[name == "Memset (Device)"].iloc[0]
    assert memset[ROLE] == ROLE_TRANSFER and memset[BYTES] == 512 and memset[FLOPS] == 0


def test_without_classification_the_longest_kernel_does_the_work(tmp_path):
    rank = _trace(tmp_path)
    t = estimate_costs(rank, None).table
    assert t[rank.gpu["name"] == GEMM][FLOPS].iloc[0] == 2 * 4096**3
    assert t[rank.gpu["name"] == SPLITK][ROLE].iloc[0] == ROLE_HELPER


def test_tensor_list_ops_split_by_duration_with_dtype_from_kernel_name(tmp_path):
    rank = _trace(tmp_path)
    t = estimate_costs(rank, classify(rank)).table
    fe = t[rank.gpu["name"] == FOREACH]
    total = 4 * 3 * (128 * 128 + 128)  # fp32: two lists read, list 0 written
    assert np.allclose(fe[BYTES].to_numpy(), [total * 30 / 40, total * 10 / 40])
    assert list(fe[DTYPE]) == ["fp32", "fp32"]
    cat = t[rank.gpu["name"] == CAT].iloc[0]
    assert cat[BYTES] == 2 * 2 * 1024 * 64 * 2 and cat[FLOPS] == 0


def test_unknown_stays_unknown_and_coverage_counts_time(tmp_path):
    rank = _trace(tmp_path)
    costs = estimate_costs(rank, classify(rank))
    t = costs.table
    for kname in ("void at::native::nonzero_kernel<float>(float*)", "mystery_kernel"):
        row = t[rank.gpu["name"] == kname].iloc[0]
        assert math.isnan(row[FLOPS]) and math.isnan(row[BYTES]) and row[ROLE] == ROLE_NONE
        assert row[SOURCE] == ""
    memcpy = t[rank.gpu["name"].str.startswith("Memcpy")].iloc[0]
    assert memcpy[BYTES] == 1 << 20
    # GPU time: 1 + 200 + 10 + 30 + 10 + 8 + 4 + 6 + 20 = 289 µs; unknown FLOPs: split-K 10,
    # nonzero 4, mystery 6 (memset, memcpy, foreach, cat and GEMM are known)
    assert costs.total_us == 289
    assert costs.flops_known_us == 289 - 20
    assert costs.bytes_known_us == 289 - 20
    assert dict(costs.unmodeled) == {"aten::nonzero": 4}
    d = costs.to_dict()
    assert d["flops"] == 2 * 4096**3 + (128 * 128 + 128)  # GEMM + foreach (1 per element)


def test_empty_and_cpu_only(tmp_path):
    b = TraceBuilder()
    b.op("aten::add", 0, 10)
    rank = tracekit.load_trace(b.write(tmp_path / "cpu.json")).rank()
    costs = estimate_costs(rank, classify(rank))
    assert len(costs.table) == 0 and costs.flops_known_share == 0.0


def test_user_triton_kernel_flops_from_recorded_metadata(tmp_path):
    # what `tracekit profile` writes for matmul_kernel(a, b, c, M, N, K, ..., BLOCK_M): the op's
    # args per parameter, the parameter names once in the top-level "tracekit" object
    b = TraceBuilder()
    b.top["tracekit"] = {"triton_metadata": "cpu_op", "triton_kernels": [
        {"name": "add_kernel", "arg_names": ["x_ptr", "y_ptr", "out_ptr", "n_elements", "BLOCK_SIZE"]},
        {"name": "matmul_kernel", "arg_names": ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "BLOCK_M"]}]}
    mk = b.op("matmul_kernel", 0, 50, kernel_backend="triton", tracekit_user_kernel=2, num_warps=4,
              **{"Input Dims": [[512, 256], [256, 1024], [512, 1024], [], [], [], []],
                 "Input type": ["c10::Half"] * 3 + ["Scalar"] * 4,
                 "Concrete Inputs": ["", "", "", "512", "1024", "256", "64"]})
    b.launch(5, 10, "matmul_kernel", 100, 40, ext=mk, api="cuLaunchKernel", cat="cuda_driver")
    add = b.op("add_kernel", 60, 30, kernel_backend="triton", tracekit_user_kernel=1, num_warps=4,
               **{"Input Dims": [[4096], [4096], [4096], [], []],
                  "Input type": ["float"] * 3 + ["Scalar"] * 2, "Concrete Inputs": ["", "", "", "4096", "1024"]})
    b.launch(65, 10, "add_kernel", 150, 5, ext=add, api="cuLaunchKernel", cat="cuda_driver")
    rank = tracekit.load_trace(b.write(tmp_path / "triton.json")).rank()
    t = estimate_costs(rank, classify(rank)).table
    m = t[rank.gpu["name"] == "matmul_kernel"].iloc[0]
    assert m[FLOPS] == 2 * 512 * 1024 * 256 and m[SOURCE] == "triton"
    assert m[BYTES] == 2 * (512 * 256 + 256 * 1024 + 512 * 1024) and m[DTYPE] == "fp16"
    a = t[rank.gpu["name"] == "add_kernel"].iloc[0]
    assert math.isnan(a[FLOPS]) and a[BYTES] == 3 * 4096 * 4


def test_legacy_conv_backward_children_use_the_parent_shapes(tmp_path):
    # 2021 schema: cudnn_convolution_backward_weight(weight_size, grad_out, input) records no
    # weight shape; its parent cudnn_convolution_backward(input, grad_out, weight) does
    b = TraceBuilder(legacy=True)
    x, go, w = [32, 512, 7, 7], [32, 2048, 7, 7], [2048, 512, 1, 1]
    b.op("aten::cudnn_convolution_backward", 0, 100, **{"Input Dims": [x, go, w] + [[]] * 8,
                                                        "Input type": ["float"] * 3 + ["GenericList"] * 8})
    wg = b.op("aten::cudnn_convolution_backward_weight", 50, 40, **{
        "Input Dims": [[], go, x] + [[]] * 7, "Input type": ["GenericList", "float", "float"] + ["Int"] * 7})
    b.launch(60, 5, "volta_sgemm_128x64_nt", 200, 50, ext=wg)
    rank = tracekit.load_trace(b.write(tmp_path / "legacy.json")).rank()
    costs = estimate_costs(rank, classify(rank))
    row = costs.table.iloc[0]
    assert row[FLOPS] == 2 * 32 * 7 * 7 * 2048 * 512
    assert row[BYTES] == 4 * (32 * 2048 * 49 + 32 * 512 * 49 + 2048 * 512)
    assert costs.flops_known_share == 1.0


def test_ops_without_shapes_are_reported_apart(tmp_path):
    b = TraceBuilder()
    mm = b.op("aten::mm", 0, 50)  # recorded without record_shapes
    b.launch(5, 5, "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", 100, 30, ext=mm)
    rank = tracekit.load_trace(b.write(tmp_path / "noshapes.json")).rank()
    costs = estimate_costs(rank, classify(rank))
    assert costs.unshaped_us == 30 and costs.unmodeled == () and costs.flops_known_us == 0
