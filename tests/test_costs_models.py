"""Per-op FLOPs/bytes models (costs.models.op_cost) against hand-computed answers."""

from __future__ import annotations

import pytest

from tracekit.analyzers.costs.models import model_for, op_cost
from tracekit.analyzers.costs.op_args import LONGEST, OpArgs, broadcast, user_gemm_flops

BF16, F32, HALF, LONG = "c10::BFloat16", "float", "c10::Half", "long int"
MB = 1 << 20


def test_addmm_4096_cubed_bf16_is_137_gflop():
    c = op_cost("aten::addmm", [[4096], [4096, 4096], [4096, 4096], [], []],
                [BF16, BF16, BF16, "Scalar", "Scalar"], [[1], [4096, 1], [1, 4096], [], []],
                ["", "", "", "1", "1"])
    assert c.flops == 2 * 4096**3 == 137_438_953_472  # 137.4 GFLOP; the bias add is not counted
    assert round(c.flops / 1e9, 1) == 137.4
    # bias [4096] + A + B read once, C [4096, 4096] written once, 2 bytes each
    assert c.bytes == 2 * (4096 + 3 * 4096 * 4096)
    assert c.dtype == "bf16"
    assert c.work == ("gemm",) and c.pick == LONGEST


def test_gemm_family():
    assert op_cost("aten::mm", [[128, 64], [64, 32]], [F32, F32]).flops == 2 * 128 * 32 * 64
    assert op_cost("aten::mm", [[128, 64], [64, 32]], [F32, F32]).bytes == 4 * (128 * 64 + 64 * 32 + 128 * 32)
    bmm = op_cost("aten::bmm", [[8, 16, 32], [8, 32, 64]], [HALF, HALF])
    assert bmm.flops == 2 * 8 * 16 * 64 * 32 and bmm.bytes == 2 * (8 * 16 * 32 + 8 * 32 * 64 + 8 * 16 * 64)
    bad = op_cost("aten::baddbmm", [[8, 16, 64], [8, 16, 32], [8, 32, 64], [], []],
                  [F32, F32, F32, "Scalar", "Scalar"], None, ["", "", "", "1", "1"])
    assert bad.flops == 2 * 8 * 16 * 64 * 32
    assert bad.bytes == 4 * (8 * 16 * 64 + 8 * 16 * 32 + 8 * 32 * 64 + 8 * 16 * 64)
    beta0 = op_cost("aten::baddbmm", [[8, 16, 64], [8, 16, 32], [8, 32, 64], [], []],
                    [F32, F32, F32, "Scalar", "Scalar"], None, ["", "", "", "0", "0.125"])
    assert beta0.bytes == bad.bytes - 4 * 8 * 16 * 64  # beta = 0: C is not read
    # linear on a 3-D input: M = 4 * 10 rows
    lin = op_cost("aten::linear", [[4, 10, 256], [512, 256], [512]], [BF16, BF16, BF16])
    assert lin.flops == 2 * 40 * 512 * 256
    assert lin.bytes == 2 * (40 * 256 + 512 * 256 + 512 + 40 * 512)
    # matmul broadcasts batch dims: [2, 1, 4, 8] @ [3, 8, 5] -> [2, 3, 4, 5]
    assert op_cost("aten::matmul", [[2, 1, 4, 8], [3, 8, 5]], [F32, F32]).flops == 2 * 6 * 4 * 5 * 8
    # GEMV
    assert op_cost("aten::mv", [[1000, 300], [300]], [F32, F32]).flops == 2 * 1000 * 300
    # torch 2.11's mv runs aten::addmv_(out[M], A[M, N], x[N]) (held-out query_loop: corpus @ q)
    gemv = op_cost("aten::addmv_", [[524288], [524288, 256], [256], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"],
                   None, ["", "", "", "0", "1"])
    assert gemv.flops == 2 * 524288 * 256 and gemv.bytes >= 2 * 524288 * 256  # the matrix read once at least


def test_topk_radix_passes():
    """topk(x[128, 524288] bf16, 100, 1): 2 counting passes (one per 8-bit digit of a 2-byte element),
    100 values (2 bytes) and indices (8 bytes) for each of 128 rows."""
    c = op_cost("aten::topk", [[128, 524288], [], [], [], []], [BF16, "Int", "Int", "Bool", "Bool"], None,
                ["", "100", "1", "True", "True"])
    assert c.bytes == 2 * 2 * 128 * 524288 + 128 * 100 * (2 + 8)
    assert c.flops == 2 * 128 * 524288
    rows0 = op_cost("aten::topk", [[64, 32], [], [], [], []], [F32, "Int", "Int", "Bool", "Bool"], None,
                    ["", "5", "0", "True", "True"])  # along dim 0: 32 selections of 5 from 64
    assert rows0.bytes == 4 * 4 * 64 * 32 + 32 * 5 * (4 + 8)


def test_scaled_mm_fp8_writes_its_out_dtype():
    c = op_cost("aten::_scaled_mm", [[256, 512], [512, 128], [], [], [], [], [], []],
                ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", F32, F32, "", "", "Scalar", "Scalar"],
                None, ["", "", "", "", "", "", "15", "False"])
    assert c.flops == 2 * 256 * 128 * 512
    assert c.dtype == "fp8"
    # fp8 inputs, two 0-dim fp32 scales, bf16 output (ScalarType code 15)
    assert c.bytes == 256 * 512 + 512 * 128 + 2 * 4 + 2 * 256 * 128


def test_broadcast_add():
    # [8192, 8192] + [8192] (fp32): reads both once, writes the broadcast shape
    c = op_cost("aten::add", [[8192, 8192], [8192], []], [F32, F32, "Scalar"])
    assert c.flops == 8192 * 8192
    assert c.bytes == 4 * (8192 * 8192 + 8192 + 8192 * 8192)
    c = op_cost("aten::mul", [[4, 1, 3], [1, 5, 3]], [F32, F32])
    assert c.flops == 60 and c.bytes == 4 * (12 + 15 + 60)
    assert broadcast([(4, 1, 3), (5, 1)]) == (4, 5, 3)
    assert broadcast([(4, 3), (5, 3)]) is None


def test_expanded_input_is_read_once_and_inplace_writes_arg0():
    # an expand()ed operand (stride 0) is read once per distinct element
    c = op_cost("aten::add", [[64, 1024], [64, 1024]], [F32, F32], [[1024, 1], [0, 1]])
    assert c.bytes == 4 * (64 * 1024 + 1024 + 64 * 1024)
    # in-place: reads self and other, writes self
    c = op_cost("aten::add_", [[1000], [1000], []], [BF16, BF16, "Scalar"])
    assert c.bytes == 2 * 3000
    assert model_for("aten::clamp_min_") is not None


def test_comparison_writes_bool_and_cast_writes_target_dtype():
    assert op_cost("aten::eq", [[100, 10], []], [LONG, "Scalar"]).bytes == 8 * 1000 + 1000
    cast = op_cost("aten::_to_copy", [[8192, 8192], [], [], [], [], [], []],
                   [F32, "Scalar", "", "", "", "Scalar", ""], None, ["", "15", "", "", "", "False", ""])
    assert cast.bytes == 8192 * 8192 * (4 + 2) and cast.dtype == "bf16" and cast.flops == 0
    copy = op_cost("aten::copy_", [[10, 20], [20, 10], []], [HALF, F32, "Scalar"], [[20, 1], [1, 20], []])
    assert copy.bytes == 200 * 4 + 200 * 2


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_flops_causal_halves(causal):
    b, h, lq, lk, e = 2, 16, 1024, 1024, 64
    c = op_cost("aten::_scaled_dot_product_flash_attention",
                [[b, h, lq, e], [b, h, lk, e], [b, h, lk, e], [], [], [], []],
                [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar", "Scalar"], None,
                ["", "", "", "0.", str(causal), "False", ""])
    full = 4 * b * h * lq * lk * e  # QK^T and PV, 2 FLOPs per multiply-add each
    assert c.flops == (full / 2 if causal else full)
    assert c.bytes == 2 * 4 * b * h * lq * e  # q, k, v read, out written
    assert c.work == ("attention", "gemm")


def test_sdpa_gqa_bytes_and_backward():
    # 32 query heads, 8 KV heads: K/V bytes are the smaller tensors
    q, kv = [1, 32, 4096, 128], [1, 8, 4096, 128]
    c = op_cost("aten::_cudnn_attention_forward", [q, kv, kv] + [[]] * 10, [BF16] * 3 + [""] * 10,
                None, ["", "", "", "", "", "", "4096", "4096", "False", "0.", "False", "False", ""])
    n_q, n_kv = 32 * 4096 * 128, 8 * 4096 * 128
    assert c.bytes == 2 * (n_q + 2 * n_kv + n_q)
    assert c.flops == 4 * 32 * 4096 * 4096 * 128
    # flash backward (layout [B, L, H, E]), causal: 2.5 x the causal forward
    x = [2, 512, 8, 64]
    bwd = op_cost("aten::_flash_attention_backward", [x, x, x, x, x, [2, 8, 512]] + [[]] * 11,
                  [HALF] * 5 + [F32] + [""] * 11, None, [""] * 11 + ["True"] + [""] * 5)
    assert bwd.flops == 2.5 * (4 * 2 * 8 * 512 * 512 * 64) / 2
    assert bwd.bytes == 2 * (2 * 3 * 2 * 512 * 8 * 64 + 2 * 2 * 512 * 8 * 64)


def test_conv2d_from_concrete_inputs():
    dims = [[64, 256, 56, 56], [256, 256, 3, 3], [], [], [], [], [], [], []]
    types = [BF16, BF16] + ["ScalarList"] * 3 + ["Scalar"] * 4
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...)
    c = op_cost("aten::cudnn_convolution", dims, types, None,
                ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"])
    assert c.flops == 2 * 64 * 56 * 56 * 256 * 256 * 9  # 236.8 GFLOP
    assert c.bytes == 2 * (64 * 256 * 56 * 56 * 2 + 256 * 256 * 9)
    # stride 2, padding 1: 28 x 28 output
    c2 = op_cost("aten::cudnn_convolution", dims, types, None,
                 ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])
    assert c2.flops == c.flops / 4
    # grouped (depthwise) conv via aten::convolution: weight [C, 1, k, k]
    dw = op_cost("aten::convolution", [[8, 32, 10, 10], [32, 1, 3, 3], [32], [], [], [], [], [], []],
                 [F32, F32, F32, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
                 None, ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "32"])
    assert dw.flops == 2 * 8 * 8 * 8 * 32 * 1 * 9
    # no Concrete Inputs (2021 traces): stride/padding unknown -> unknown, not a guess
    assert op_cost("aten::cudnn_convolution", dims, types) is None


def test_conv_backward_from_grad_output_shape():
    go, x, w = [32, 64, 28, 28], [32, 32, 56, 56], [64, 32, 3, 3]
    c = op_cost("aten::convolution_backward", [go, x, w] + [[]] * 8, [F32] * 3 + [""] * 8, None,
                [""] * 10 + ["[True, True, False]"])
    per_pass = 2 * 32 * 28 * 28 * 64 * 32 * 9
    assert c.flops == 2 * per_pass
    assert c.bytes == 4 * (32 * 64 * 28 * 28 + 64 * 32 * 9 + 32 * 32 * 56 * 56 + 32 * 32 * 56 * 56 + 64 * 32 * 9)


def test_reductions_norms_softmax():
    s = op_cost("aten::sum", [[16384, 8192], [], [], []], [F32, "ScalarList", "Scalar", ""], None,
                ["", "[1]", "False", ""])
    assert s.flops == 16384 * 8192 and s.bytes == 4 * (16384 * 8192 + 16384)
    full = op_cost("aten::mean", [[100, 10], [], [], [], []], [F32, "ScalarList", "Scalar", "", F32],
                   None, ["", "[]", "False", "", ""])
    assert full.bytes == 4 * (1000 + 1)
    # dims exist but were not recorded (2021 schema): unknown
    assert op_cost("aten::mean", [[32, 2048, 7, 7], [], [], []], [F32, "GenericList", "Bool", ""]) is None
    ln = op_cost("aten::native_layer_norm", [[16384, 8192], [], [8192], [8192], []],
                 [BF16, "ScalarList", BF16, BF16, "Scalar"], None, ["", "[8192]", "", "", "1e-05"])
    # x read, weight and bias read, y written, mean and rstd (fp32) per row written
    assert ln.bytes == 2 * 16384 * 8192 * 2 + 2 * 8192 * 2 + 16384 * 4 * 2
    sm = op_cost("aten::_softmax", [[4096, 1000], [], []], [HALF, "Scalar", "Scalar"], None,
                 ["", "-1", "True"])
    assert sm.bytes == 4096 * 1000 * (2 + 4)  # half_to_float writes fp32
    bn = op_cost("aten::native_batch_norm", [[8, 16, 32, 32], [16], [16], [16], [16], [], [], []],
                 [F32] * 5 + ["Scalar"] * 3, None, ["", "", "", "", "", "True", "0.1", "1e-05"])
    assert bn.bytes == 4 * (2 * 8 * 16 * 32 * 32 + 4 * 16 + 8 * 16 * 32 * 32)  # training: x read twice


def test_embedding_and_gather():
    emb = op_cost("aten::embedding", [[50257, 768], [8, 128], [], [], []], [BF16, LONG] + ["Scalar"] * 3)
    assert emb.bytes == 8 * 128 * 768 * 2 * 2 + 8 * 128 * 8 and emb.flops == 0
    # gather with an expand()ed index [16384, 4096] (stride 0 on dim 1): index read once per row
    g = op_cost("aten::gather", [[50257, 4096], [], [16384, 4096], [], [16384, 4096]],
                [BF16, "Scalar", LONG, "Scalar", BF16], [[4096, 1], [], [1, 0], [], [4096, 1]],
                ["", "0", "", "False", ""])
    assert g.bytes == 16384 * 4096 * 2 * 2 + 16384 * 8


def test_tensor_lists_count_elements_for_the_kernel_dtype():
    cat = op_cost("aten::cat", [[[1024, 64], [1024, 64]], []], ["TensorList", "Scalar"])
    assert cat.bytes is None and cat.list_elems == 2 * 2 * 1024 * 64
    fe = op_cost("aten::_foreach_add_", [[[128, 128], [128]], [[128, 128], [128]], []],
                 ["TensorList", "TensorList", "Scalar"])
    assert fe.list_elems == 3 * (128 * 128 + 128)  # two lists read, list 0 written
    # 2021 schema: a GenericList with no shapes is unknown
    assert op_cost("aten::cat", [[], []], ["GenericList", "Int"]) is None


def test_triton_kernels():
    extra = {"kernel_backend": "triton", "kernel_name": "triton_poi_fused_add_mul_sin_0"}
    poi = op_cost("triton_poi_fused_add_mul_sin_0", [[8192, 8192]] * 4 + [[]], [F32] * 4 + ["Scalar"],
                  None, [""] * 4 + ["67108864"], extra)
    assert poi.bytes == 4 * 4 * 8192 * 8192 and poi.flops is None  # FLOPs unknown, not guessed
    tem = op_cost("triton_tem_fused_mm_0", [[512, 256], [256, 1024], [512, 1024]], [BF16] * 3, None,
                  None, {"kernel_backend": "triton"})
    assert tem.flops == 2 * 512 * 1024 * 256
    user = {"tracekit_user_kernel": 1, "kernel_backend": "triton",
            "arg_names": ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "BLOCK_M"]}
    dims = [[256, 128], [128, 64], [256, 64], [], [], [], []]
    types = [HALF, HALF, HALF, "Scalar", "Scalar", "Scalar", "Scalar"]
    mk = op_cost("matmul_kernel", dims, types, None, ["", "", "", "256", "64", "128", "64"], user)
    assert mk.flops == 2 * 256 * 64 * 128 and mk.bytes == 2 * (256 * 128 + 128 * 64 + 256 * 64)
    # square elementwise kernel with no M/N/K arguments: no FLOPs
    add = op_cost("add_kernel", [[64, 64]] * 3 + [[]], [F32] * 3 + ["Scalar"], None,
                  ["", "", "", "4096"], {**user, "arg_names": ["x", "y", "out", "n"]})
    assert add.flops is None and add.bytes == 3 * 64 * 64 * 4


def test_unknown_and_malformed_ops_are_none():
    assert op_cost("aten::nonzero", [[100]], [F32]) is None
    assert op_cost("my_custom_op", [[100]], [F32]) is None
    assert op_cost("aten::mm", [[128, 64]], [F32]) is None  # one operand missing
    assert op_cost("aten::mm", [[128, 64], [64, 32]], ["Scalar", "Scalar"]) is None
    assert op_cost("aten::mm", None, None) is None
    assert op_cost("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3]] + [[]] * 5, [F32, F32] + [""] * 5,
                   None, ["", "", "", "[1, 1]", "[9, 9]", "[1, 1]", "x"]) is not None
    assert OpArgs.of([[2, 3]], ["float"]).tensor(5) is None


def test_kv_cache_index_copy_and_arange():
    # HF static KV cache: cache[1, 12, 53, 64].index_copy_(2, pos[32], new[1, 12, 32, 64])
    c = op_cost("aten::index_copy_", [[1, 12, 53, 64], [], [32], [1, 12, 32, 64]],
                [F32, "Scalar", LONG, F32], None, ["", "2", "", ""])
    assert c.bytes == 32 * 8 + 2 * 4 * 12 * 32 * 64  # index, source read, as many elements written
    assert op_cost("aten::arange", [[]] * 5, ["Scalar", "", "", "", "Scalar"], None,
                   ["32", "", "", "", "False"]).bytes == 32 * 8  # int64
    assert op_cost("aten::arange", [[]] * 7, ["Scalar"] * 4 + ["", "", "Scalar"], None,
                   ["0", "10", "3", "6", "", "", "False"]).bytes == 4 * 4  # 0, 3, 6, 9 as fp32


def test_wrapped_python_numbers_do_not_promote():
    # `scores * 0.125` records the number as a 0-dim 'double' tensor: the result stays bf16
    c = op_cost("aten::mul", [[8, 16, 2048, 2048], []], [BF16, "double"])
    n = 8 * 16 * 2048 * 2048
    assert c.dtype == "bf16" and c.bytes == 2 * n + 8 + 2 * n
    # an integer tensor times a Python float becomes the default float dtype
    assert op_cost("aten::mul", [[10], []], [LONG, "double"]).bytes == 8 * 10 + 8 + 4 * 10


@pytest.mark.parametrize(("weight", "expected"), [
    ([2048, 65536], 2.0 * 8192 * 65536 * 2048),  # B[K, N]: the tutorial's matmul_kernel(a, b, c, M, N, K)
    ([65536, 2048], 2.0 * 8192 * 65536 * 2048),  # B[N, K]: nn.Linear's weight read transposed (x @ W.T)
    ([4096, 2048], None),  # neither K × N nor N × K: not this kernel's operands
])
def test_user_triton_matmul_flops_from_its_arguments(weight, expected):
    """2·M·N·K of a user Triton kernel whose integer arguments M, N, K match A[M, K] and B (held-out
    triton_softcap_head_row_order: x (8192, 2048), W (65536, 2048), out (8192, 65536))."""
    types = ["c10::BFloat16"] * 3 + ["Scalar"] * 3
    args = OpArgs.of([[8192, 2048], weight, [8192, 65536], [], [], []], types,
                     concrete=["", "", "", "8192", "65536", "2048"])
    assert user_gemm_flops(args, ["x_ptr", "w_ptr", "out_ptr", "M", "N", "K"]) == expected
