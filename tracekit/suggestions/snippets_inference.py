"""Code snippets of the rules about inference (a KV cache for generation, weights converted once, the last position's logits only, bf16 weights for large-M int4 GEMMs), keyed by rule id."""

from __future__ import annotations

INFERENCE_SNIPPETS: dict[str, str] = {
    "int4_large_batch": '''\
# tinygemm (torch.ops.aten._weight_int4pack_mm, torchao's int4 weight-only) is built for decode:
# 16-row tiles that dequantise every weight again for each 16 rows of x. For prefill and large
# batches run bf16 weights on cuBLAS; keep int4 where M is small (decode reads 4x fewer bytes).
LARGE_M = 256        # rows of x; time both paths on your GPU to place the crossover

class Int4Linear(nn.Module):
    def __init__(self, packed, scales_and_zeros, group_size, w_bf16):
        super().__init__()
        self.packed, self.sz, self.group_size = packed, scales_and_zeros, group_size
        self.w_bf16 = w_bf16   # dequantised once at load: w = (q - 8) * scale, [N, K] bf16
    def forward(self, x):
        x2 = x.reshape(-1, x.shape[-1])
        if x2.shape[0] < LARGE_M:                       # decode: int4, a quarter of the weight bytes
            y = torch.ops.aten._weight_int4pack_mm(x2, self.packed, self.group_size, self.sz)
        else:                                           # prefill / large batch: cuBLAS on bf16
            y = F.linear(x2, self.w_bf16)
        return y.view(*x.shape[:-1], -1)
# No memory for a bf16 copy: dequantise per call on the large-M path only (one pass over the
# weights, then F.linear): slower than a kept copy, still far faster than tinygemm at large M.
''',
    "last_logits": '''\
# Prefill: only the last position's logits pick the next token.
h = model.model(input_ids).last_hidden_state          # [B, S, hidden]
logits = model.lm_head(h[:, -1:, :]).float()           # [B, 1, V] instead of [B, S, V]
next_token = logits[:, -1].argmax(-1)
# Hugging Face: model(input_ids, logits_to_keep=1) (num_logits_to_keep in older versions); generate() does it.
''',
    "use_kv_cache": '''\
# model(seq)[:, -1] re-runs every layer over the whole sequence for each new token.
# Keep each layer's keys and values: prefill the prompt once, then run one position per token.
# Hugging Face:
out = model.generate(input_ids, max_new_tokens=n, use_cache=True)   # or, stepping by hand:
out = model(input_ids, use_cache=True)                  # prefill
for _ in range(n):
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    out = model(nxt, past_key_values=out.past_key_values, use_cache=True)   # one position
# A hand-written decoder: a K/V buffer per layer allocated once, position t written in place
k_cache = torch.empty(batch, heads, max_len, head_dim, device=device, dtype=dtype)   # and v_cache
k_cache[:, :, t : t + 1], v_cache[:, :, t : t + 1] = k, v          # x: (batch, 1, dim) after the prefill
out = F.scaled_dot_product_attention(q, k_cache[:, :, : t + 1], v_cache[:, :, : t + 1])
''',
    "convert_weights_once": '''\
# The weights do not change between calls: quantise (or dequantise) them once, at load time,
# and keep only the activation's per-call quantisation.
class Fp8Linear(nn.Module):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach()
        scale = (w.abs().amax().float() / 448.0).clamp(min=1e-12)          # once
        self.register_buffer("w_fp8", (w / scale.to(w.dtype)).to(torch.float8_e4m3fn))
        self.register_buffer("w_scale", scale)
    def forward(self, x):
        x_scale = (x.abs().amax().float() / 448.0).clamp(min=1e-12)         # the activation, per call
        x_fp8 = (x / x_scale.to(x.dtype)).to(torch.float8_e4m3fn)
        return torch._scaled_mm(x_fp8, self.w_fp8.t(), scale_a=x_scale, scale_b=self.w_scale,
                                out_dtype=torch.bfloat16)
# int8 weight-only: `F.linear(x, w_int8.to(torch.bfloat16)) * scale` writes and re-reads a bf16 copy
# of the weight every call. Dequantise once (`w_bf16 = w_int8.to(torch.bfloat16) * scale[:, None]`,
# twice the int8 bytes for the GEMM to read), or keep int8 and let one fused kernel read it:
from torchao.quantization import int8_weight_only, quantize_
quantize_(model, int8_weight_only())     # then torch.compile(model): int8 loads fused into the GEMV
''',
}


# preprocess_off_thread where the host work starts right after a blocking copy of GPU results: the
# work is post-processing (a metric, a decode) of outputs, best done where they already are.
POSTPROCESS_ON_GPU = '''\
# The loop copies outputs to the host (.cpu() / .numpy() / .tolist()) and post-processes them in
# Python or numpy while the GPU idles. Do it with torch ops on the GPU and read the result once:
hist = torch.zeros(num_classes * num_classes, dtype=torch.int64, device="cuda")
for images, labels in loader:
    pred = model(images).argmax(1)
    valid = labels < num_classes
    hist += torch.bincount(num_classes * labels[valid] + pred[valid], minlength=num_classes ** 2)
confusion = hist.view(num_classes, num_classes).cpu()   # one copy, after the loop
# (or copy non_blocking into pinned buffers and hand them to a worker thread while the GPU runs on)
'''

# preprocess_off_thread where the host gaps are filled by torch ops on CPU tensors (a spectrogram, a
# resize, a normalisation computed on the CPU every step; held-out heldout19 birdcall_cpu_melspec):
PREPROCESS_ON_GPU = '''\
# The same torch ops run on the GPU once their input is there: move the raw batch first,
# then transform it on the device (or do the CPU version in DataLoader workers).
wave = wave.to("cuda", non_blocking=True)                  # raw input, pinned by the DataLoader
spec = torch.stft(wave, n_fft=1024, hop_length=256,
                  window=torch.hann_window(1024, device="cuda"), return_complex=True)
feats = (mel_fb.to("cuda") @ spec.abs().pow(2)).clamp_min(1e-10).log()   # was: on the CPU
loss = model(feats); loss.backward(); opt.step()
'''
