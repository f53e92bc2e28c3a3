"""Column names of the Trace tables and the data tables that drive parsing (categories, launch APIs)."""

from __future__ import annotations

import re

# --- GPU activities (kernels, memcpy, memset) -------------------------------------------------
GPU_NAME = "name"
GPU_KIND = "kind"  # 'kernel' | 'memcpy' | 'memset'
GPU_TS = "ts"
GPU_DUR = "dur"
GPU_END = "end"
GPU_DEVICE = "device"
GPU_STREAM = "stream"
GPU_CORRELATION = "correlation"
GPU_EXTERNAL_ID = "external_id"
GPU_GRID = ("grid_x", "grid_y", "grid_z")
GPU_BLOCK = ("block_x", "block_y", "block_z")
GPU_REGISTERS = "registers"
GPU_SHARED_MEM = "shared_mem"
GPU_BLOCKS_PER_SM = "blocks_per_sm"
GPU_WARPS_PER_SM = "warps_per_sm"
GPU_OCCUPANCY = "occupancy"
GPU_BYTES = "bytes"
GPU_LAUNCH = "launch"  # row position in RankTrace.runtime, -1 when unlinked
GPU_OP = "op"  # row position in RankTrace.ops, -1 when unlinked
GPU_STEP = "step"  # ProfilerStep number, -1 outside steps
GPU_GRAPH = "graph"  # graph id of a CUDA/HIP graph replay (trace.graphs), -1 for eager work
GPU_GRAPH_MATCH = "graph_match"  # how a replayed activity got its op: 'capture' | 'inferred' | ''

KIND_KERNEL = "kernel"
KIND_MEMCPY = "memcpy"
KIND_MEMSET = "memset"
GPU_KINDS = (KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET)

# --- CPU ops (aten and other record_function ops) ---------------------------------------------
OP_NAME = "name"
OP_PID = "pid"
OP_TID = "tid"
OP_TS = "ts"
OP_DUR = "dur"
OP_END = "end"
OP_EXTERNAL_ID = "external_id"
OP_DEPTH = "depth"
OP_PARENT = "parent"
OP_INPUT_DIMS = "input_dims"
OP_INPUT_TYPES = "input_types"
OP_INPUT_STRIDES = "input_strides"
OP_CONCRETE_INPUTS = "concrete_inputs"
OP_SEQ = "seq"  # the autograd sequence number the op recorded ("Sequence number": grad mode was on), -1 none
OP_EXTRA = "extra"  # dict of the remaining args for kernel-launching ops (Inductor / Triton), else None
OP_STEP = "step"
OP_ORIGIN = "origin"  # '' for the trace's own ops, else the capture trace the op was copied from

# --- runtime / driver API calls ---------------------------------------------------------------
RT_NAME = "name"
RT_API = "api"  # 'runtime' | 'driver'
RT_PID = "pid"
RT_TID = "tid"
RT_TS = "ts"
RT_DUR = "dur"
RT_END = "end"
RT_CORRELATION = "correlation"
RT_EXTERNAL_ID = "external_id"
RT_KIND = "kind"  # LAUNCH_KINDS, KIND_SYNC, SYNC_COPY or KIND_OTHER
RT_OP = "op"
RT_STEP = "step"

# --- annotations and steps --------------------------------------------------------------------
AN_NAME = "name"
AN_GPU = "gpu"
AN_PID = "pid"
AN_TID = "tid"
AN_TS = "ts"
AN_DUR = "dur"
AN_END = "end"
AN_STEP = "step"

STEP_NUMBER = "step"
STEP_NAME = "name"
STEP_TS = "ts"
STEP_DUR = "dur"
STEP_END = "end"

# --- data tables ------------------------------------------------------------------------------
# Event category -> table. Lower-case is the current Kineto schema, capitalised the 2021 schema.
# [memory] instant events (profile_memory=True): one row per allocation (bytes > 0) or free (< 0)
MEMORY_EVENT = "[memory]"
MEM_TS = "ts"
MEM_BYTES = "bytes"
MEM_ALLOCATED = "allocated"  # the allocator's Total Allocated after the event, bytes (NaN: not written)
MEM_RESERVED = "reserved"  # Total Reserved after the event, bytes (NaN: not written)
MEM_DEVICE_TYPE = "device_type"  # c10::DeviceType: 0 CPU, 1 CUDA, 6 HIP (-1: not written)
MEM_DEVICE_ID = "device_id"
MEM_ADDR = "addr"  # the block's address: an allocation and its free share it (-1: not written)
MEM_PID = "pid"
MEM_TID = "tid"
MEM_EXTERNAL_ID = "external_id"  # always -1: lets trace.link find the enclosing op by time and thread
MEM_OP = "op"  # row in ops of the innermost op on the same thread around the event, -1 if none
MEM_STEP = "step"
MEM_ORDER = (MEM_TS, MEM_BYTES, MEM_ALLOCATED, MEM_RESERVED, MEM_DEVICE_TYPE, MEM_DEVICE_ID, MEM_ADDR, MEM_PID,
             MEM_TID, MEM_EXTERNAL_ID)
GPU_DEVICE_TYPES = (1, 6)  # CUDA, HIP

# python_function events (with_stack=True / with_modules): 'nn.Module: Linear_0', 'model.py(88): forward'
PY_ORDER = ("name", "pid", "tid", "ts", "dur", "end")
PY_NAME, PY_PID, PY_TID, PY_TS, PY_DUR, PY_END = PY_ORDER
PYTHON_CATEGORY = "python_function"

CATEGORY_TABLE: dict[str, str] = {
    "kernel": "gpu",
    "Kernel": "gpu",
    "gpu_memcpy": "gpu",
    "Memcpy": "gpu",
    "gpu_memset": "gpu",
    "Memset": "gpu",
    "cpu_op": "ops",
    "Operator": "ops",
    "DataLoader": "ops",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "runtime",
    "user_annotation": "annotations",
    "gpu_user_annotation": "annotations",
    "ac2g": "flows",
    "async_cpu_to_gpu": "flows",
}

GPU_KIND_BY_CATEGORY: dict[str, str] = {
    "kernel": KIND_KERNEL,
    "Kernel": KIND_KERNEL,
    "gpu_memcpy": KIND_MEMCPY,
    "Memcpy": KIND_MEMCPY,
    "gpu_memset": KIND_MEMSET,
    "Memset": KIND_MEMSET,
}

RUNTIME_API_BY_CATEGORY: dict[str, str] = {
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "driver",
}

# RT_KIND values: a launch call's kind is the kind of the GPU activity it starts (KIND_*), or a graph
# replay; syncs block the host; the rest is 'other'.
KIND_GRAPH = "graph"
KIND_SYNC = "sync"
KIND_OTHER = "other"
LAUNCH_KINDS = (*GPU_KINDS, KIND_GRAPH)
SYNC_COPY = "sync_copy"  # a copy the host waits for (cudaMemcpy, hipMemcpyWithStream): a sync, not a launch
SYNC_KINDS = (KIND_SYNC, SYNC_COPY)  # calls that block the host until the GPU catches up
LINKED_KINDS = (*LAUNCH_KINDS, SYNC_COPY)  # calls linked to the GPU activity they started

# Runtime/driver API name -> kind, first match wins. Launches put work on a GPU stream and are
# linked to GPU activities by correlation id; 'sync' and SYNC_COPY calls block the host on the GPU.
LAUNCH_APIS: tuple[tuple[str, str], ...] = (
    (r"^cudaLaunchKernel(ExC)?(_v\d+)?$", KIND_KERNEL),
    (r"^cudaLaunchCooperativeKernel(MultiDevice)?$", KIND_KERNEL),
    (r"^cuLaunchKernel(Ex)?$", KIND_KERNEL),
    (r"^cuLaunchCooperativeKernel$", KIND_KERNEL),
    (r"^hipLaunchKernel$", KIND_KERNEL),
    (r"^hipExtLaunchKernel$", KIND_KERNEL),
    (r"^hipExtModuleLaunchKernel$", KIND_KERNEL),
    (r"^hipModuleLaunchKernel$", KIND_KERNEL),
    (r"^hipLaunchCooperativeKernel$", KIND_KERNEL),
    (r"^(cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch)(_v\d+)?$", KIND_GRAPH),
    # synchronous copies block the host: syncs that also start a copy, never launch time
    (r"^(cuda|hip)Memcpy(2D|3D|Peer)?(WithStream|ToSymbol|FromSymbol)?(_v\d+)?$", SYNC_COPY),
    (r"^cuMemcpy(HtoD|DtoH|DtoD|HtoA|AtoH|2D|3D|Peer)?(_v\d+)?$", SYNC_COPY),
    (r"^(cuda|hip)Memcpy(2D|3D|Peer)?(ToSymbol|FromSymbol)?Async(_v\d+)?$", KIND_MEMCPY),
    (r"^cuMemcpy.*Async(_v\d+)?$", KIND_MEMCPY),
    (r"^(cuda|hip)Memset(D\d+|2D|3D)?(Async)?(_v\d+)?$", KIND_MEMSET),
    (r"^cuMemset.*$", KIND_MEMSET),
    (r"^(cuda|hip)(Device|Stream|Event)Synchronize$", KIND_SYNC),
    (r"^cu(Ctx|Stream|Event)Synchronize$", KIND_SYNC),
)

_LAUNCH_API_RES = tuple((re.compile(p), kind) for p, kind in LAUNCH_APIS)


def runtime_kind(name: str) -> str:
    """The kind of a runtime/driver API call: a LAUNCH_KINDS value, KIND_SYNC, SYNC_COPY or KIND_OTHER."""
    for pattern, kind in _LAUNCH_API_RES:
        if pattern.match(name):
            return kind
    return KIND_OTHER


STEP_NAME_RE = re.compile(r"^ProfilerStep#([0-9]{1,18})$")  # past int64: not a step

# --- tracekit's own keys in a trace it recorded (docs/triton-metadata.md): the one definition ---
TRACEKIT_KEY = "tracekit"  # top-level provenance object written by `tracekit profile`
TRITON_TABLE_KEY = "triton_kernels"  # list in that object, one entry per user Triton kernel
ARG_NAMES_KEY = "arg_names"  # key of such an entry: the kernel's parameter names
DOT_TABLE_KEYS = ("uses_dot", "tl_dot")  # truthy in such an entry when the kernel calls tl.dot
# keys of a Triton launch's cpu_op args
KERNEL_BACKEND_KEY = "kernel_backend"  # TRITON_BACKEND (Inductor writes it; so does tracekit profile)
TRITON_BACKEND = "triton"
USER_TRITON_KEY = "tracekit_user_kernel"  # N >= 1: entry N-1 of TRITON_TABLE_KEY (user kernels)
INDUCTOR_OP_KEY = "kernel_file"  # Inductor's triton kernel cpu_op
DOT_OP_KEYS = ("tracekit_uses_dot", "uses_dot")  # truthy when the Triton kernel calls tl.dot
# Python garbage-collection pauses `tracekit profile` records (gc.callbacks): a user_annotation per
# collection, "tracekit::gc.collect() gen 2" when the script called gc.collect(), "tracekit::gc gen N"
# for the interpreter's own collections; GC_PAUSES_KEY in the "tracekit" object says they were recorded.
GC_ANNOTATION = "tracekit::gc"
GC_EXPLICIT = ".collect()"
GC_PAUSES_KEY = "gc_pauses"
GC_NAME_RE = re.compile(r"^tracekit::gc(\.collect\(\))? gen ([0-2])$")
# Debug settings that slow every step, as `tracekit profile` read them at the end of the run: an
# object in the "tracekit" object (docs/profile.md, "Debug settings")
DEBUG_MODES_KEY = "debug_modes"
