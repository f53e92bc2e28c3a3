"""The typed view of an event's `args` object: the keys tracekit reads, decoded by msgspec."""

from __future__ import annotations

from typing import Any

import msgspec

field = msgspec.field
NULL = msgspec.Raw(b"null")


class Args(msgspec.Struct, gc=False):
    """args of any event family; keys absent from an event stay None (unknown keys are ignored)."""

    external_id: int | None = field(name="External id", default=None)
    external_id_legacy: int | None = field(name="external id", default=None)
    correlation: int | None = None
    # GPU activities
    device: int | None = None
    stream: int | str | None = None
    grid: list[int] | str | None = None
    block: list[int] | str | None = None
    registers: int | None = field(name="registers per thread", default=None)
    shared_mem: int | None = field(name="shared memory", default=None)
    blocks_per_sm: float | None = field(name="blocks per SM", default=None)
    warps_per_sm: float | None = field(name="warps per SM", default=None)
    occupancy: float | None = field(name="est. achieved occupancy %", default=None)
    bytes: int | str | None = None  # ROCm runtime calls write it as a string
    # [memory] instant events (profile_memory=True): the allocator's totals after the event
    mem_bytes: int | float | None = field(name="Bytes", default=None)  # > 0 allocated, < 0 freed
    total_allocated: int | float | None = field(name="Total Allocated", default=None)
    total_reserved: int | float | None = field(name="Total Reserved", default=None)
    device_type: int | None = field(name="Device Type", default=None)
    device_id: int | None = field(name="Device Id", default=None)
    addr: int | None = field(name="Addr", default=None)
    # CPU ops: shapes stay raw JSON until needed (decoding them for every op would dominate)
    input_dims: msgspec.Raw = field(name="Input Dims", default=NULL)
    input_types: msgspec.Raw = field(name="Input type", default=NULL)
    input_strides: msgspec.Raw = field(name="Input Strides", default=NULL)
    concrete_inputs: msgspec.Raw = field(name="Concrete Inputs", default=NULL)
    # autograd's sequence number at the op (recorded while grad mode is on; it advances per graph node)
    sequence_nr: int | None = field(name="Sequence number", default=None)
    # Inductor / tracekit Triton launch ops: their whole args are kept (see OP_EXTRA)
    kernel_file: Any = None
    kernel_backend: Any = None
    kernel_hash: Any = None


NO_ARGS = Args()
ARGS_FIELDS = dict(zip(Args.__struct_encode_fields__, Args.__struct_fields__, strict=True))
# keys of a launch op's args that have columns of their own, so are left out of OP_EXTRA
OP_COLUMN_KEYS = frozenset({"External id", "external id", "Input Dims", "Input type", "Input Strides",
                            "Concrete Inputs", "Ev Idx", "Record function id"})
ANY = msgspec.json.Decoder()


def external_id(args: Args) -> int:
    """External id of an args struct (either spelling), or -1."""
    if args.external_id is not None:
        return args.external_id
    return args.external_id_legacy if args.external_id_legacy is not None else -1


RAW_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def loose_args(value: object) -> Args | None:
    """Args from a generic dict, keeping the keys whose values have the expected type."""
    if not isinstance(value, dict):
        return None
    clean: dict[str, Any] = {}
    for key in ARGS_FIELDS:
        if key not in value or key in RAW_KEYS:
            continue
        try:
            msgspec.convert({key: value[key]}, Args, strict=False)
        except msgspec.ValidationError:
            continue
        clean[key] = value[key]
    args = msgspec.convert(clean, Args, strict=False)
    for key in RAW_KEYS:
        if key in value:
            setattr(args, ARGS_FIELDS[key], msgspec.Raw(msgspec.json.encode(value[key])))
    return args
