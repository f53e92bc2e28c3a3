"""Real-time 2D segmentation whose frames reach the network as MONAI-style MetaTensors.

Workload: streaming segmentation of ultrasound frames, one frame at a time as they arrive (batch 1,
1 x 256 x 256, float32 with cuDNN's default TF32 convolutions, inference mode) with a MONAI
`BasicUNet`-shaped 2D network (features 32 / 32 / 64 / 128 / 256 / 32; every block two 3x3
convolutions, each followed by an affine InstanceNorm and LeakyReLU(0.1); max-pool down, 2x2
transposed-convolution up, skip concatenation; 2.0M weights), then sigmoid, threshold and the
segmented area; 8 frames per step. The frames come out of the preprocessing as MetaTensors (after
`monai.data.MetaTensor`: a `torch.Tensor` subclass carrying the affine, the metadata dictionary and
the list of applied operations) and go into the network as they are. Every torch function and tensor
method called on a MetaTensor, inside every layer (`conv2d`, `instance_norm`, `leaky_relu`,
`max_pool2d`, `cat`, and the `size()` / `dim()` / `shape` checks the functional layers make), goes
through its Python `__torch_function__`: the plain op, the wrapping of each output as a MetaTensor,
a search of the arguments for metadata and a copy of it into the output (dictionary and lists copied,
as `MetaObj.copy_meta_from(copy_attr=True)` does). That adds tens of microseconds of Python to each
of the ~110 kernels of a frame, whose GPU work is small: the stream is host-bound.

Variant `plain_tensor`: the frame is unwrapped with `as_tensor()` (MONAI's `MetaTensor.as_tensor()`;
MONAI's `set_track_meta(False)` does the same globally) before the network and the metadata is kept
beside it: the same kernels, launched through the ordinary dispatch. Bit-identical outputs.

Variant `cuda_graph` (extra, timed but not recorded): the baseline's per-frame forward (MetaTensor in)
captured once in a CUDA graph on a static frame buffer and replayed. Without CUDA it runs eagerly.
"""

import itertools
from copy import deepcopy

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

FEATURES = (32, 32, 64, 128, 256, 32) if CUDA else (8, 8, 16, 16, 32, 8)
SIZE, FRAMES, POOL = (256, 8, 64) if CUDA else (32, 8, 16)


class MetaTensor(torch.Tensor):
    """The metadata-propagating part of `monai.data.MetaTensor` (MetaObj attributes, `update_meta`,
    `copy_meta_from`, `copy_items`), without MONAI's lazy resampling or batch decollation."""

    @staticmethod
    def __new__(cls, x: torch.Tensor, affine: torch.Tensor | None = None, meta: dict | None = None) -> "MetaTensor":
        return torch.as_tensor(x).as_subclass(cls)

    def __init__(self, x: torch.Tensor, affine: torch.Tensor | None = None, meta: dict | None = None) -> None:
        super().__init__()
        self._meta = dict(meta or {})
        self._meta["affine"] = affine if affine is not None else torch.eye(4, dtype=torch.float64)
        self._applied_operations: list = []
        self._pending_operations: list = []
        self._is_batch = False

    @staticmethod
    def copy_items(data: object) -> object:
        if isinstance(data, bool | int | float | str | type(None)):
            return data
        if isinstance(data, list | dict):
            return data.copy()
        if isinstance(data, torch.Tensor):
            return data.detach().clone()
        return deepcopy(data)

    @staticmethod
    def flatten_meta_objs(*args: object) -> list["MetaTensor"]:
        out = []
        for a in itertools.chain(*args):
            if isinstance(a, list | tuple):
                out.extend(MetaTensor.flatten_meta_objs(a))
            elif isinstance(a, MetaTensor):
                out.append(a)
        return out

    def copy_meta_from(self, input_objs: list["MetaTensor"], copy_attr: bool = True) -> None:
        first = next((o for o in input_objs if hasattr(o, "_meta")), None)
        if first is None:
            return
        if copy_attr:
            self.__dict__.update({a: MetaTensor.copy_items(v) for a, v in first.__dict__.items()})
        else:
            self.__dict__ = dict(first.__dict__)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = {} if kwargs is None else kwargs
        ret = super().__torch_function__(func, types, args, kwargs)
        if isinstance(ret, str | bool | int | float | torch.Size | torch.dtype | torch.device | type(None)):
            return ret
        unpack = not isinstance(ret, tuple | list)
        rets = [ret] if unpack else ret
        meta_args = MetaTensor.flatten_meta_objs(args, kwargs.values())
        is_batch = any(getattr(m, "_is_batch", False) for m in meta_args)
        out = []
        for r in rets:
            if isinstance(r, MetaTensor):
                r.copy_meta_from(meta_args, copy_attr=not is_batch)
                r._is_batch = is_batch
            out.append(r)
        return out[0] if unpack else type(ret)(out)

    def as_tensor(self) -> torch.Tensor:
        return self.as_subclass(torch.Tensor)


class TwoConv(nn.Sequential):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1), nn.InstanceNorm2d(cout, affine=True), nn.LeakyReLU(0.1),
                         nn.Conv2d(cout, cout, 3, padding=1), nn.InstanceNorm2d(cout, affine=True), nn.LeakyReLU(0.1))


class UpCat(nn.Module):
    def __init__(self, cin: int, ccat: int, cout: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, 2, stride=2)
        self.convs = TwoConv(cin // 2 + ccat, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.convs(torch.cat([skip, self.up(x)], dim=1))


class BasicUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        f = FEATURES
        self.conv_0 = TwoConv(1, f[0])
        self.downs = nn.ModuleList(TwoConv(f[i], f[i + 1]) for i in range(4))
        self.upcat_4, self.upcat_3 = UpCat(f[4], f[3], f[3]), UpCat(f[3], f[2], f[2])
        self.upcat_2, self.upcat_1 = UpCat(f[2], f[1], f[1]), UpCat(f[1], f[0], f[5])
        self.final = nn.Conv2d(f[5], 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.conv_0(x)]
        for down in self.downs:
            skips.append(down(F.max_pool2d(skips[-1], 2)))
        x0, x1, x2, x3, x4 = skips
        u = self.upcat_1(self.upcat_2(self.upcat_3(self.upcat_4(x4, x3), x2), x1), x0)
        return self.final(u)


def main() -> None:
    args = options(__doc__, ("plain_tensor", "cuda_graph")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = BasicUNet().eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    video = torch.rand(POOL, 1, 1, SIZE, SIZE, device=DEVICE, generator=gen)  # intensity-scaled frames
    affine = torch.diag(torch.tensor([0.3, 0.3, 1.0, 1.0], dtype=torch.float64))  # mm per pixel

    def preprocess(i: int) -> MetaTensor:
        """The frame as the transforms hand it over: a MetaTensor with its metadata."""
        frame = MetaTensor(video[i], affine=affine, meta={"filename_or_obj": "probe_0.stream", "frame": i,
                                                          "spatial_shape": (SIZE, SIZE), "original_channel_dim": "no_channel"})
        frame._applied_operations.append({"class": "ScaleIntensity", "id": i})
        return frame

    run = model
    if args.variant == "cuda_graph" and CUDA:
        static_in = preprocess(0)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(2):
                model(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.inference_mode():
            static_out = model(static_in)

        def run(x: torch.Tensor) -> torch.Tensor:
            static_in.copy_(x)
            graph.replay()
            return static_out

    area = torch.zeros((), device=DEVICE, dtype=torch.float64)
    logit_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            for f in range(FRAMES):
                frame = preprocess((step * FRAMES + f) % POOL)
                x = frame.as_tensor() if args.variant == "plain_tensor" else frame
                logits = run(x)
                mask = torch.sigmoid(logits) > 0.5
                area += mask.sum()
                logit_sum += logits.sum()
            timer.end()
    timer.report(f"metatensor_unet_stream variant={args.variant or 'baseline'} segmented pixels "
                 f"{area.item():.0f} logit sum {logit_sum.item():.4f}")


if __name__ == "__main__":
    main()
