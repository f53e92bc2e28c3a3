"""Task distillation whose teacher forward sits outside the bf16 autocast region and runs in float32.

Workload: distilling a BERT-base-shaped teacher (30,522-token embeddings, 12 post-norm encoder
layers of width 768, 12 heads of 64, GELU MLP 3072, pooler, 3 classes; 109M float32 weights, frozen,
eval mode) into a 4-layer student of the same width (initialised from the teacher's embeddings,
first 4 layers, pooler and classifier; fused AdamW), 32 sentence pairs of
128 tokens per step with a key-padding mask (lengths 64..128). The loss is cross-entropy on the
labels plus the KL divergence between the student's and the teacher's logits at temperature 2. The
student's forward and loss run under `torch.autocast("cuda", torch.bfloat16)`; the teacher is called
before that block, under `torch.no_grad()` only, so its GEMMs run in float32 (the default
`float32_matmul_precision("highest")`: no tensor cores) and its attention and LayerNorms in float32.

Variant `teacher_autocast`: the teacher call moved inside the same autocast block (still under
`torch.no_grad()`): bf16 GEMMs and attention; its logits differ from the float32 ones by bf16
rounding.

Variant `compiled` (extra, timed but not recorded): the baseline with the student and the teacher
each wrapped in `torch.compile` (default mode).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

if CUDA:
    DIM, HEADS, TEACHER_LAYERS, STUDENT_LAYERS, VOCAB, BATCH, SEQ = 768, 12, 12, 4, 30522, 32, 128
else:
    DIM, HEADS, TEACHER_LAYERS, STUDENT_LAYERS, VOCAB, BATCH, SEQ = 32, 4, 3, 1, 500, 4, 16
CLASSES, TEMPERATURE = 3, 2.0


class BertLayer(nn.Module):
    """Post-norm encoder layer (fused qkv, SDPA with a key-padding mask, GELU MLP)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.ln1, self.ln2 = nn.LayerNorm(DIM, eps=1e-12), nn.LayerNorm(DIM, eps=1e-12)
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class BertClassifier(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.word = nn.Embedding(VOCAB, DIM)
        self.position = nn.Embedding(512, DIM)
        self.token_type = nn.Embedding(2, DIM)
        self.ln = nn.LayerNorm(DIM, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer() for _ in range(layers))
        self.pooler = nn.Linear(DIM, DIM)
        self.classifier = nn.Linear(DIM, CLASSES)

    def forward(self, ids: torch.Tensor, types: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.word(ids) + self.position(positions) + self.token_type(types))
        mask = attention_mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, mask)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def make_batches(gen: torch.Generator, n: int) -> tuple[torch.Tensor, ...]:
    """n batches of sentence pairs ([CLS] a [SEP] b [SEP], padded to SEQ), token types, masks, labels."""
    lengths = torch.randint(SEQ // 2, SEQ + 1, (n, BATCH), device=DEVICE, generator=gen)
    ids = torch.randint(1000 if CUDA else 10, VOCAB, (n, BATCH, SEQ), device=DEVICE, generator=gen)
    pos = torch.arange(SEQ, device=DEVICE)
    mask = (pos < lengths[..., None]).long()
    split = lengths[..., None] // 2
    types = ((pos >= split) & (mask == 1)).long()
    ids = torch.where(mask == 1, ids, torch.zeros_like(ids))
    ids[..., 0] = 101 if CUDA else 1
    labels = torch.randint(0, CLASSES, (n, BATCH), device=DEVICE, generator=gen)
    return ids, types, mask, labels


def main() -> None:
    args = options(__doc__, ("teacher_autocast", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        teacher = BertClassifier(TEACHER_LAYERS).eval().requires_grad_(False)
        student = BertClassifier(STUDENT_LAYERS)
    student.load_state_dict(teacher.state_dict(), strict=False)  # embeddings, first layers, pooler, classifier
    student_net, teacher_net = student, teacher
    if args.variant == "compiled":
        student_net, teacher_net = torch.compile(student), torch.compile(teacher)
    opt = adamw(list(student.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    ids, types, masks, labels = make_batches(gen, 8)

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for step in range(args.steps):
        timer.tick()
        b = step % ids.shape[0]
        batch = (ids[b], types[b], masks[b])
        if args.variant != "teacher_autocast":
            with torch.no_grad():
                teacher_logits = teacher_net(*batch)
        with bf16():
            if args.variant == "teacher_autocast":
                with torch.no_grad():
                    teacher_logits = teacher_net(*batch)
            logits = student_net(*batch)
            kd = F.kl_div(F.log_softmax(logits.float() / TEMPERATURE, -1),
                          F.log_softmax(teacher_logits.float() / TEMPERATURE, -1), reduction="batchmean", log_target=True)
            loss = F.cross_entropy(logits.float(), labels[b]) + kd * TEMPERATURE**2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"distill_teacher_fp32 variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
