"""Decision-Transformer evaluation rollouts run with autograd on: no `torch.no_grad()` around the policy.

Workload: evaluating a Decision Transformer policy (return-to-go, state and action tokens for the
last 20 timesteps: 60 tokens; embeddings of width 128 with a timestep embedding, 3 pre-norm
`nn.TransformerEncoderLayer`s with 4 heads and GELU MLP 512, a causal mask; tanh action head;
0.7M weights, float32) on 256 parallel environments simulated on the GPU (HalfCheetah-sized:
17-dim states, 6-dim actions, linear dynamics with seeded noise and a quadratic reward), 8
environment steps per step: each step runs the policy on the 256 context windows, steps the
environments, and shifts the windows. The model is in `eval()` mode but the loop is not under
`torch.no_grad()` or `torch.inference_mode()` (the action is `.detach()`ed before the environment,
as the original evaluation code does before `.cpu()`): every op records autograd history for the
parameters, and `nn.TransformerEncoderLayer`'s fused inference fast path
(`torch._transformer_encoder_layer_fwd`), which needs grad mode off when the weights require grad,
is skipped: each layer runs as ~20 separate Python-level ops. The step is launch-bound (~1,200
small kernels).

Variant `inference_mode`: the rollout under `torch.inference_mode()`: no autograd recording, and each
encoder layer runs as one fused native op; the same actions and returns (up to the fused kernels'
rounding).

Variant `cuda_graph` (extra, timed but not recorded): one environment step of the baseline (grad
mode still on) captured once in a CUDA graph on static buffers and replayed. Without CUDA it runs
eagerly.
"""

import contextlib

import torch
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    ENVS, EMBED, LAYERS, HEADS, ENV_STEPS = 256, 128, 3, 4, 8
else:
    ENVS, EMBED, LAYERS, HEADS, ENV_STEPS = 4, 32, 2, 2, 8
STATE, ACT, CONTEXT, MAX_EP_LEN = 17, 6, 20, 1000
RTG_SCALE, TARGET_RETURN = 1000.0, 6000.0


class DecisionTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_timestep = nn.Embedding(MAX_EP_LEN, EMBED)
        self.embed_return, self.embed_state = nn.Linear(1, EMBED), nn.Linear(STATE, EMBED)
        self.embed_action = nn.Linear(ACT, EMBED)
        self.embed_ln = nn.LayerNorm(EMBED)
        layer = nn.TransformerEncoderLayer(EMBED, HEADS, 4 * EMBED, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.predict_action = nn.Sequential(nn.Linear(EMBED, ACT), nn.Tanh())
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(3 * CONTEXT), persistent=False)

    def forward(self, rtg: torch.Tensor, states: torch.Tensor, actions: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        """(N, K, 1), (N, K, STATE), (N, K, ACT), (N, K) -> the action for the last state (N, ACT)."""
        n, k, _ = states.shape
        t = self.embed_timestep(timesteps)
        tokens = torch.stack([self.embed_return(rtg) + t, self.embed_state(states) + t, self.embed_action(actions) + t], 2)
        x = self.embed_ln(tokens.reshape(n, 3 * k, EMBED))
        x = self.encoder(x, mask=self.causal, is_causal=True)
        return self.predict_action(x[:, 1::3])[:, -1]  # predicted from the state tokens


def main() -> None:
    args = options(__doc__, ("inference_mode", "cuda_graph")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        policy = DecisionTransformer().eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a_mat = torch.eye(STATE, device=DEVICE) + 0.01 * torch.randn(STATE, STATE, device=DEVICE, generator=gen)
    b_mat = 0.1 * torch.randn(ACT, STATE, device=DEVICE, generator=gen)
    rtg = torch.full((ENVS, CONTEXT, 1), TARGET_RETURN / RTG_SCALE, device=DEVICE)
    states = torch.zeros(ENVS, CONTEXT, STATE, device=DEVICE)
    states[:, -1] = torch.randn(ENVS, STATE, device=DEVICE, generator=gen)
    actions = torch.zeros(ENVS, CONTEXT, ACT, device=DEVICE)
    timesteps = torch.zeros(ENVS, CONTEXT, dtype=torch.long, device=DEVICE)
    noise = torch.randn(4096, ENVS, STATE, device=DEVICE, generator=gen) * 0.05  # a fixed noise tape
    t_env = torch.zeros((), dtype=torch.long, device=DEVICE)
    returns = torch.zeros(ENVS, device=DEVICE)

    def env_step() -> None:
        """Policy on the windows, one environment step, the windows shifted by one timestep."""
        action = policy(rtg, states, actions, timesteps).detach()
        actions[:, -1] = action  # the action taken at the last state
        s = states[:, -1]
        reward = 1.0 - 0.01 * s.pow(2).sum(-1) - 0.1 * action.pow(2).sum(-1)
        s_next = s @ a_mat + action @ b_mat + noise.index_select(0, (t_env % noise.shape[0]).view(1))[0]
        returns.add_(reward)
        t_env.add_(1)
        rtg.copy_(torch.cat([rtg[:, 1:], (rtg[:, -1, 0] - reward / RTG_SCALE)[:, None, None]], 1))
        states.copy_(torch.cat([states[:, 1:], s_next[:, None]], 1))
        actions.copy_(torch.cat([actions[:, 1:], torch.zeros_like(actions[:, :1])], 1))
        timesteps.copy_(torch.cat([timesteps[:, 1:], (timesteps[:, -1:] + 1).clamp(max=MAX_EP_LEN - 1)], 1))

    step_fn = env_step
    if args.variant == "cuda_graph" and CUDA:
        saved = [b.clone() for b in (rtg, states, actions, timesteps, t_env, returns)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                env_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            env_step()
        for dst, src in zip((rtg, states, actions, timesteps, t_env, returns), saved, strict=True):
            dst.copy_(src)
        step_fn = graph.replay

    action_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode() if args.variant == "inference_mode" else contextlib.nullcontext():
        for _ in range(args.steps):
            timer.tick()
            for _ in range(ENV_STEPS):
                step_fn()
                action_sum += actions[:, -2].double().sum()
            timer.end()
    timer.report(f"dt_rollout_grad_mode variant={args.variant or 'baseline'} mean return "
                 f"{returns.mean().item():.5f} action sum {action_sum.item():.4f}")


if __name__ == "__main__":
    main()
