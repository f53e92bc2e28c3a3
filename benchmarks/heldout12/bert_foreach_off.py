"""BERT-base fine-tuning (Hugging Face `BertForSequenceClassification`) with `AdamW(foreach=False)`.

The classic GLUE-style loop: batch 32 x 128 tokens, bf16 autocast, dropout 0.1, gradient clipping
at 1.0, a linear warm-up schedule, the usual decay / no-decay parameter groups. The optimizer was
set to `foreach=False` (to save the multi-tensor temporaries' memory), so `AdamW.step` runs the
single-tensor path: a Python loop over the 201 parameter tensors, ~8 kernels each, and ~10 passes
over the 110M float32 weights and states. Variant `fused`: `AdamW(..., fused=True)`, one fused
kernel pass over all tensors.
"""

import torch
from _common import CUDA, DEVICE, StepTimer, bf16, options
from transformers import BertConfig, BertForSequenceClassification

args = options(__doc__, ("fused",)).parse_args()
torch.manual_seed(0)
if CUDA:
    cfg = BertConfig(num_labels=3)  # bert-base: 12 layers, 768 wide, 12 heads, 30,522 tokens
    batch, seq = 32, 128
else:
    cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, num_labels=3)
    batch, seq = 4, 16
with torch.device(DEVICE):
    model = BertForSequenceClassification(cfg)
model.train()

no_decay = ("bias", "LayerNorm.weight")
groups = [
    {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
if args.variant == "fused":
    opt = torch.optim.AdamW(groups, lr=2e-5, eps=1e-8, fused=True)
else:
    opt = torch.optim.AdamW(groups, lr=2e-5, eps=1e-8, foreach=False)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))

gen = torch.Generator(device=DEVICE).manual_seed(1)
input_ids = torch.randint(1000 if CUDA else 5, cfg.vocab_size, (4, batch, seq), generator=gen, device=DEVICE)
input_ids[:, :, 0] = 101 if CUDA else 1  # [CLS]
labels = torch.randint(0, 3, (4, batch), generator=gen, device=DEVICE)
attention_mask = torch.ones(batch, seq, dtype=torch.long, device=DEVICE)
token_type_ids = torch.zeros(batch, seq, dtype=torch.long, device=DEVICE)

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
for i in range(args.steps):
    timer.tick()
    with bf16():
        out = model(input_ids=input_ids[i % 4], attention_mask=attention_mask,
                    token_type_ids=token_type_ids, labels=labels[i % 4])
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    total += out.loss.detach()
    del out
    timer.end()
timer.report(f"bert_foreach_off variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")
