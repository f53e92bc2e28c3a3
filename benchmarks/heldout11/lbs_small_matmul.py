"""SMPL-style body-model fitting whose linear blend skinning applies per-vertex 4 x 4 transforms with `torch.matmul`.

GEMM shapes. Fitting 512 bodies at once (pose 24 x 3 axis-angle, 10 shape coefficients and a
translation per body, Adam at lr 0.01) to target meshes of a synthetic SMPL-sized model (6,890
vertices, 24 joints with SMPL's kinematic tree, shape and pose blend shapes, a joint regressor and
skinning weights drawn from fixed seeds), float32, as in the `smplx` package's `lbs()`: Rodrigues
rotations (`torch.bmm(K, K)` on 3 x 3), the kinematic chain (`torch.matmul` of (512, 4, 4)
transforms, 23 in sequence), per-vertex transforms T = W A, and `torch.matmul(T, v_homo[..., None])`
over (512, 6890, 4, 4) x (512, 6890, 4, 1): 3.5M batched 4 x 4 by 4 x 1 GEMMs forward and two
batched GEMMs of the same count in backward, far below any GEMM kernel's tile.

Variant `broadcast_sum`: every product of these small matrices (3 x 3, 4 x 4, 4 x 1) as a broadcast
multiply and a sum over the inner dimension (`(a[..., :, :, None] * b[..., None, :, :]).sum(-2)`);
the skinning-weight product W A stays a GEMM.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options

VARIANTS = ("broadcast_sum",)
BODIES, VERTS = (512, 6890) if CUDA else (2, 300)
JOINTS, BETAS = 24, 10
MatMul = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
PARENTS = (-1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 12, 13, 14, 16, 17, 18, 19, 20, 21)


def make_small_mm(broadcast: bool) -> MatMul:
    def small_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if broadcast:
            return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)
        return torch.matmul(a, b)

    return small_mm


def rodrigues(rot_vecs: torch.Tensor, mm: MatMul) -> torch.Tensor:
    """(n, 3) axis-angle -> (n, 3, 3) rotation matrices (smplx's batch_rodrigues)."""
    n = rot_vecs.shape[0]
    angle = torch.norm(rot_vecs + 1e-8, dim=1, keepdim=True)
    rot_dir = rot_vecs / angle
    cos, sin = torch.cos(angle)[:, None], torch.sin(angle)[:, None]
    rx, ry, rz = torch.split(rot_dir, 1, dim=1)
    zeros = torch.zeros((n, 1), dtype=rot_vecs.dtype, device=rot_vecs.device)
    k = torch.cat([zeros, -rz, ry, rz, zeros, -rx, -ry, rx, zeros], dim=1).view(n, 3, 3)
    ident = torch.eye(3, dtype=rot_vecs.dtype, device=rot_vecs.device)[None]
    return ident + sin * k + (1 - cos) * mm(k, k)


def rigid_transform(rot_mats: torch.Tensor, joints: torch.Tensor, parents: torch.Tensor, mm: MatMul) -> torch.Tensor:
    """The kinematic chain (smplx's batch_rigid_transform): (B, J, 4, 4) transforms relative to the rest pose."""
    joints = joints.unsqueeze(-1)
    rel_joints = torch.cat((joints[:, :1], joints[:, 1:] - joints[:, parents]), 1)
    local = torch.cat((F.pad(rot_mats, [0, 0, 0, 1]), F.pad(rel_joints, [0, 0, 0, 1], value=1.0)), dim=3)
    chain = [local[:, 0]]
    for i in range(1, JOINTS):
        chain.append(mm(chain[PARENTS[i]], local[:, i]))
    transforms = torch.stack(chain, dim=1)
    joints_homogen = F.pad(joints, [0, 0, 0, 1])
    return transforms - F.pad(mm(transforms, joints_homogen), [3, 0, 0, 0, 0, 0, 0, 0])


class BodyModel:
    """Synthetic SMPL-sized assets and the `lbs()` forward."""

    def __init__(self, gen: torch.Generator, mm: MatMul) -> None:
        g = dict(device=DEVICE, generator=gen)
        self.mm = mm
        self.template = torch.rand(VERTS, 3, **g) * torch.tensor([0.6, 1.7, 0.3], device=DEVICE)
        self.shapedirs = torch.randn(VERTS, 3, BETAS, **g) * 0.01
        self.posedirs = torch.randn((JOINTS - 1) * 9, VERTS * 3, **g) * 0.001
        self.j_regressor = torch.softmax(torch.randn(JOINTS, VERTS, **g) * 3, dim=1)
        self.weights = torch.softmax(torch.randn(VERTS, JOINTS, **g) * 2, dim=1)
        self.parents = torch.tensor(PARENTS[1:], device=DEVICE)

    def __call__(self, pose: torch.Tensor, betas: torch.Tensor, transl: torch.Tensor) -> torch.Tensor:
        b = pose.shape[0]
        v_shaped = self.template + torch.einsum("bl,mkl->bmk", betas, self.shapedirs)
        joints = torch.einsum("bik,ji->bjk", v_shaped, self.j_regressor)
        rot_mats = rodrigues(pose.reshape(-1, 3), self.mm).view(b, JOINTS, 3, 3)
        ident = torch.eye(3, dtype=pose.dtype, device=pose.device)
        pose_feature = (rot_mats[:, 1:] - ident).reshape(b, -1)
        v_posed = v_shaped + torch.matmul(pose_feature, self.posedirs).view(b, VERTS, 3)
        a = rigid_transform(rot_mats, joints, self.parents, self.mm)
        t = torch.matmul(self.weights.expand(b, VERTS, JOINTS), a.view(b, JOINTS, 16)).view(b, VERTS, 4, 4)
        v_homo = F.pad(v_posed, [0, 1], value=1.0)
        verts = self.mm(t, v_homo.unsqueeze(-1))
        return verts[:, :, :3, 0] + transl.unsqueeze(1)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    body = BodyModel(gen, make_small_mm(args.variant == "broadcast_sum"))
    true_pose = torch.randn(BODIES, JOINTS * 3, device=DEVICE, generator=gen) * 0.3
    true_betas = torch.randn(BODIES, BETAS, device=DEVICE, generator=gen)
    true_transl = torch.randn(BODIES, 3, device=DEVICE, generator=gen) * 0.1
    with torch.no_grad():
        target = body(true_pose, true_betas, true_transl)
    pose = torch.zeros(BODIES, JOINTS * 3, device=DEVICE).add_(1e-3).requires_grad_()
    betas = torch.zeros(BODIES, BETAS, device=DEVICE, requires_grad=True)
    transl = torch.zeros(BODIES, 3, device=DEVICE, requires_grad=True)
    opt = torch.optim.Adam([pose, betas, transl], lr=0.01, **({"fused": True} if CUDA else {}))
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        verts = body(pose, betas, transl)
        err = (verts - target).pow(2).sum(-1).mean()
        loss = err + 1e-3 * pose.pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += err.detach()
        timer.end()
    timer.report(f"lbs_small_matmul variant={args.variant or 'baseline'} mean vertex error {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
