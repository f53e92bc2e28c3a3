"""Rule about static weights converted on every call: quantise to float8 or int8 (or dequantise from int8) once, at load time."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import weight_convert as wc
from tracekit.suggestions.common import (
    SILENT_BELOW_PCT,
    Scope,
    fmt_bytes,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.units import plural

LOOKUP = "aten::embedding"  # a consumer that reads rows of the converted table, not all of it
# int8 GEMMs (torch._int_mm, CUTLASS i16832 kernels) on activations of 8,192 rows reach this share of the
# dense int8 peak (H100, heldout19 mixer_fake_quant_serving --variant int8_mm: 8192×768 @ 768×3072 at
# 535 TOPS and 8192×3072 @ 3072×768 at 683 TOPS, 27 % and 35 % of 1979)
INT8_MM_EFF = 0.3
# an int8 GEMM's int32 output is rescaled to float in a pass of its own (torch._int_mm has no epilogue):
# read 4 B and write 4 B per element at this share of the memory bandwidth (the same recording: the
# rescale `mul` on 8192×3072 at 2384 GB/s, 71 % of 3352)
DEQUANT_BYTES, DEQUANT_SHARE = 8.0, 0.7


def _from_fp8(source: str, to: str) -> bool:
    """A float8 weight dequantised to a wider float (the stored checkpoint, not a quantisation step)."""
    return "Float8" in source and "Float8" not in to


def fp8_ratio(analysis: Analysis) -> float:
    """A bf16 GEMM's time run in FP8 on the same device, as a share: bf16 peak / fp8 peak for
    compute-bound GEMMs, and half the weight bytes for memory-bound ones (1 B against 2 B): the larger of
    the two; 1.0 where the device has no FP8 tensor cores (A100, MI250) or is unknown."""
    device = analysis.device
    fp8 = device.peak_flops("fp8") if device is not None else None
    bf16 = device.peak_flops("bf16") if device is not None else None
    return max(bf16 / fp8, 0.5) if fp8 and bf16 else 1.0


def int8_factor(analysis: Analysis, rank: int, consumer: str, weight: str) -> float:
    """The share of its time a float GEMM reading a weight of this shape (either orientation) keeps as an
    int8 GEMM: its FLOPs at INT8_MM_EFF of the int8 peak, plus the rescale of its int32 output (FLOPs /
    2K elements × DEQUANT_BYTES at DEQUANT_SHARE of the bandwidth), over its time now (roofline rows of
    the rank, at most 1); 1.0 where the device has no int8 tensor cores or no such row has FLOPs."""
    device = analysis.device
    peak = device.peak_flops("int8") if device is not None else None
    r = next((x for x in analysis.ranks if x.rank == rank), None)
    if not peak or r is None or r.roofline.table is None:
        return 1.0
    dims = tuple(int(x) for x in weight.strip("[]").split(","))
    shapes, k = {dims, dims[::-1]}, dims[1] if consumer == "aten::linear" else dims[0]
    flops = time = 0.0
    for row in r.roofline.table.to_dict("records"):
        if row["class"] == "gemm" and isinstance(row["shapes"], tuple) and shapes & set(row["shapes"]) \
                and row["flops"] == row["flops"] and row["flops"] > 0:
            flops += float(row["flops"])
            time += float(row["time_us"])
    if not time > 0 or not k:
        return 1.0
    assert device is not None
    rescale = flops / (2 * k) * DEQUANT_BYTES / (device.memory_bandwidth * DEQUANT_SHARE)
    return min(1.0, (flops / (peak * INT8_MM_EFF) + rescale) * 1e6 / time)


def _fake_quant_gemms(analysis: Analysis, scope: Scope, rows: list[dict[str, object]], saving: float) -> Suggestion | None:
    """Quantization-aware-trained layers served unconverted: the weights' fake-quantization kernels gone
    and each GEMM that reads one as an int8 GEMM (int8_factor of its time)."""
    n = scope.steps
    mine = [x for x in rows if x["to"] == wc.FAKE_QUANT]
    calls = sum(float(str(x["calls_per_step"])) for x in mine) / scope.ranks
    fq = sum(float(str(x["kernel_us_per_step"])) for x in mine) / scope.ranks
    gemm = sum(float(str(x["gemm_us_per_step"])) for x in mine) / scope.ranks
    kept = sum(float(str(x["gemm_us_per_step"])) * float(str(x["gemm_factor"])) for x in mine) / scope.ranks
    name = analysis.device.name if analysis.device is not None else "this device"
    formula = (f"per step, the weights' fake-quantization kernels ({mine[0]['ops']}: {fmt_us(fq)}) + the float GEMMs "
               f"that read them ({fmt_us(gemm)}) − the same FLOPs as int8 GEMMs on {name} at "
               f"{100 * INT8_MM_EFF:.0f} % of its int8 peak, each output rescaled from int32 in a pass of its own "
               f"({fmt_us(kept)}) = {fmt_us(saving / n)} per step; the "
               "activations' quantization stays (an int8 GEMM quantizes its input every call too)")
    title = (f"Convert the quantization-aware-trained layers for serving (int8 weights quantized once, int8 GEMMs: "
             f"torchao's int8 quantize_ or torch.ao.quantization.convert): {plural(round(calls), 'GEMM call')} per "
             "step fake-quantize a float weight and multiply in float")
    return suggestion("convert_weights_once", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def _fp8_gemms(analysis: Analysis, scope: Scope, rows: list[dict[str, object]], saving: float,
               ratio: float) -> Suggestion | None:
    """Float8 weights dequantised to bf16 before every GEMM on a device with FP8 tensor cores: the
    dequantisation kernels gone and each such GEMM × bf16 peak / fp8 peak."""
    n = scope.steps
    mine = [x for x in rows if float(str(x["gemm_factor"])) < 1.0]
    calls = sum(float(str(x["calls_per_step"])) for x in mine) / scope.ranks
    deq = sum(float(str(x["kernel_us_per_step"])) for x in mine) / scope.ranks
    gemm = sum(float(str(x["gemm_us_per_step"])) for x in mine) / scope.ranks
    name = analysis.device.name if analysis.device is not None else "this device"
    formula = (f"per step, the dequantisation kernels ({mine[0]['ops']}: {fmt_us(deq)}) + the GEMMs that read the "
               f"dequantised weights ({fmt_us(gemm)}) × (1 − {ratio:.2f}): an FP8 GEMM on {name} runs at "
               f"bf16 peak / fp8 peak = {ratio:.2f} of the bf16 one's time (half the weight bytes when memory-bound) "
               f"= {fmt_us(saving / n)} per step ({fmt_us(saving)} over {plural(n, 'step')})")
    title = (f"Run the GEMMs in FP8 on the stored float8 weights (torch._scaled_mm, torchao's Float8 linear): "
             f"{plural(round(calls), 'GEMM call')} per step dequantise a float8 weight to bf16 and multiply in bf16")
    return suggestion("convert_weights_once", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


def convert_weights_once(analysis: Analysis) -> Suggestion | None:
    """A GEMM's static weight converted every call (patterns.weight_converts), in every headline step of
    an inference trace (a trained weight changes every step: it is converted once per step anyway).
    Traced estimate: the conversions' kernel time; the what-if also removes their launches and the
    dispatch before them, and keeps each GEMM at least at its roof for the bytes it reads (an
    int8 weight dequantised once is read as bf16: twice the int8 bytes). Silent below SILENT_BELOW_PCT."""
    if any(getattr(r.patterns, "training", False) for r in analysis.ranks):
        return None
    scope = Scope.of(analysis)
    groups: dict[tuple[int, str, str, str, str], _Group] = {}
    for r, table in rank_tables(analysis, "weight_converts"):
        if table is None or not len(table):
            continue
        t = table[in_headline(r, table[wc.WC_STEP].to_numpy())]
        for row in t.to_dict("records"):
            key = (r.rank, str(row[wc.WC_CONSUMER]), str(row[wc.WC_WEIGHT]), str(row[wc.WC_SOURCE]), str(row[wc.WC_TO]))
            groups.setdefault(key, _Group(str(row[wc.WC_OPS]), float(row[wc.WC_WEIGHT_BYTES]),
                                          len(r.launch.steady_steps))).add(row)
    kept = {k: g for k, g in groups.items() if len(g.steps) >= max(g.headline, 1)}  # every headline step
    if not kept:
        return None
    n = scope.steps
    ratio = fp8_ratio(analysis)
    factors = {key: ratio if _from_fp8(key[3], key[4]) else int8_factor(analysis, key[0], key[1], key[2])
               if key[4] == wc.FAKE_QUANT else 1.0 for key in kept}
    rows = [{"rank": rank, "op": consumer, "weight": weight, "source": source, "to": to, "ops": g.ops,
             "calls_per_step": g.calls / n, "launches_per_step": g.launches / n,
             "output_scales_per_step": g.scales / n, "kernel_us_per_step": g.time_us / n,
             "gemm_us_per_step": g.gemm_us / n, "weight_bytes": g.weight_bytes,
             "gemm_factor": factors[(rank, consumer, weight, source, to)],
             "saving_us": g.time_us + g.gemm_us * (1.0 - factors[(rank, consumer, weight, source, to)])}
            for (rank, consumer, weight, source, to), g in kept.items()]
    rows.sort(key=lambda x: -float(str(x["saving_us"])))
    saving = sum(float(str(x["saving_us"])) for x in rows) / scope.ranks
    if any(x["to"] == wc.FAKE_QUANT for x in rows):
        return _fake_quant_gemms(analysis, scope, rows, saving)
    if any(float(str(x["gemm_factor"])) < 1.0 for x in rows):
        return _fp8_gemms(analysis, scope, rows, saving, ratio)
    calls = sum(g.calls for g in kept.values()) / n / scope.ranks
    launches = sum(g.launches for g in kept.values()) / n / scope.ranks
    to_fp8 = any("Float8" in str(x["to"]) for x in rows)
    to_int = any(str(x["to"]) in ("signed char", "unsigned char") for x in rows)
    from_int = any(str(x["source"]).endswith(("signed char", "unsigned char")) for x in rows)
    autocast = any(str(x["ops"]).startswith("autocast") for x in rows)
    what = " and ".join(w for w, on in (("quantise them to float8", to_fp8), ("quantise them to int8", to_int), ("dequantise them from int8", from_int),
                                        ("cast them from float32 under autocast", autocast)) if on)
    formula = (f"Σ over {plural(len(rows), 'weight shape')} of the conversion kernels' time (each GEMM call's weight "
               f"chain: {rows[0]['ops']}) = {fmt_us(saving)} ({fmt_us(saving / n)} per step); their "
               f"{launches:.0f} launches per step go too; the GEMMs stay, each at least at its roof for the "
               f"bytes it reads ({fmt_bytes(float(str(rows[0]['weight_bytes'])))} of weight per call for {rows[0]['weight']})")
    if all(str(x["op"]) == LOOKUP for x in rows):
        formula = (f"Σ over {plural(len(rows), 'table shape')} of the conversion kernels' time (each lookup's table "
                   f"chain: {rows[0]['ops']}, over the whole {rows[0]['weight']} table) = {fmt_us(saving)} "
                   f"({fmt_us(saving / n)} per step); their {launches:.0f} launches per step go too; the lookups stay")
    elif autocast and not from_int and not to_fp8:
        formula += ("; autocast's cast cache lasts one autocast region: a float32 model run under autocast casts "
                    "every weight again each forward; `model.to(torch.bfloat16)` once keeps only the GEMMs")
    elif from_int:
        formula += ("; an int8 weight dequantised once is kept in bf16: the GEMM reads 2 B per weight, twice the "
                    "int8 bytes (a fused int8 GEMM reads 1 B)")
    kernels = f"({plural(round(launches), 'launch', 'launches')}, {fmt_us(saving / n)} of kernels per step)"
    if all(str(x["op"]) == LOOKUP for x in rows):  # an embedding table converted whole to read a few rows
        title = (f"Convert only the rows you look up: {plural(round(calls), 'embedding lookup')} per step {what} "
                 f"(the whole table) every call {kernels}; gather first, `table[ids].to(dtype) * scale[ids, None]`, "
                 "or convert the table once at load time")
    else:
        title = (f"Convert the weights once at load time: {plural(round(calls), 'GEMM call')} per step {what} "
                 f"every call {kernels}")
    return suggestion("convert_weights_once", title, saving, scope, formula, rows, min_pct=SILENT_BELOW_PCT)


@dataclass
class _Group:
    """One weight shape's conversions over the headline steps (rows of patterns.weight_converts added up)."""

    ops: str
    weight_bytes: float
    headline: int
    steps: set[int] = field(default_factory=set)
    calls: int = 0
    launches: float = 0.0
    scales: int = 0
    time_us: float = 0.0
    gemm_us: float = 0.0

    def add(self, row: dict[str, object]) -> None:
        self.steps.add(int(str(row[wc.WC_STEP])))
        self.calls += int(str(row[wc.WC_CALLS]))
        self.launches += float(str(row[wc.WC_LAUNCHES]))
        self.scales += int(str(row[wc.WC_OUTPUT_SCALE]))
        self.time_us += float(str(row[wc.WC_TIME_US]))
        self.gemm_us += float(str(row[wc.WC_GEMM_US]))
