"""Fixture: a tiny training loop. argv: STEPS MODE, MODE in hook|explicit|explicit-first|two|range|updates
(updates: four optimizer steps per iteration, one aten::cumsum at its start, tracekit.step() at its end)."""

import sys

import torch

from tracekit.profile import step, step_range

steps, mode = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
critic = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
opt2 = torch.optim.SGD(critic.parameters(), lr=0.1)
x = torch.randn(16, 8)
for _ in range(steps):
    if mode == "explicit-first":
        step()
    if mode == "updates":
        x.cumsum(0)
        for _ in range(4):
            model(x).square().mean().backward()
            opt.step()
        step()
        continue
    if mode == "range":
        with step_range():
            model(x).square().mean().backward()
            opt.step()
        continue
    loss = critic(model(x)).square().mean()
    loss.backward()
    opt.step()
    if mode == "two":
        opt2.step()
    opt.zero_grad()
    opt2.zero_grad()
    if mode == "explicit":
        step()
print("trained", steps, mode)
