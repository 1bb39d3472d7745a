"""A tiny GPT, its batch and its loss, for the dump demonstrations (fp64).

Token + position embeddings, two pre-LayerNorm blocks x += attn(ln1(x)); x += mlp(ln2(x)) with
causal multi-head attention and a GELU MLP, a final LayerNorm and an untied head. The sizes all
differ (vocab 13, d_model 12, 3 heads, MLP 20, 7 positions, batch 8) so that a transposed or
misplaced dimension cannot hide behind an equal one.

The loss is the mean token cross-entropy over the labels that are not ignored (-100): the
normalizer is the number of valid labels in the whole batch, which is what a data-parallel run must
reproduce when its ranks or micro-batches hold different numbers of them.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, D_MODEL, N_HEADS, MLP_HIDDEN, SEQ_LEN, BATCH = 13, 12, 3, 20, 7, 8
N_LAYERS = 2
BLOCK_NAMES = [f"blocks.{i}" for i in range(N_LAYERS)]
IGNORE = -100
# Ignored labels (padding at the end of a row) per row of the batch. Halves 0-3 and 4-7 hold the
# same number of valid labels (5 ignored each); quarters, thirds and pairs of rows do not.
IGNORED_PER_ROW = [3, 2, 0, 0, 0, 0, 1, 4]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(D_MODEL, 3 * D_MODEL), nn.Linear(D_MODEL, D_MODEL)
        self.mlp = nn.Module()
        self.mlp.fc, self.mlp.proj = nn.Linear(D_MODEL, MLP_HIDDEN), nn.Linear(MLP_HIDDEN, D_MODEL)

    def attention(self, x):
        batch, seq, _ = x.shape
        head_dim = D_MODEL // N_HEADS
        q, k, v = (t.view(batch, seq, N_HEADS, head_dim).transpose(1, 2)
                   for t in self.attn.qkv(x).split(D_MODEL, dim=-1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
        future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        return self.attn.proj((weights @ v).transpose(1, 2).reshape(batch, seq, D_MODEL))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp.proj(F.gelu(self.mlp.fc(self.ln2(x))))


class TinyGpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb, self.pos_emb = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(SEQ_LEN, D_MODEL)
        self.blocks = nn.ModuleList(Block() for _ in range(N_LAYERS))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.tok_emb(input_ids) + self.pos_emb(torch.arange(input_ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def make_model(seed=29):
    """The same fp64 model in every process: every parameter random (gains near 1, biases near 0
    but not 0) so that no gradient term hides behind a zero or a one."""
    torch.manual_seed(seed)
    model = TinyGpt().double()
    with torch.no_grad():
        gains = {id(m.weight) for m in model.modules() if isinstance(m, nn.LayerNorm)}
        for name, p in model.named_parameters():
            if id(p) in gains:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.5 * torch.randn_like(p))
    return model


def make_batch(seed=7):
    """input_ids [BATCH, SEQ_LEN] and next-token labels with IGNORED_PER_ROW padding labels."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ_LEN + 1), generator=generator)
    input_ids, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    for row, ignored in enumerate(IGNORED_PER_ROW):
        if ignored:
            labels[row, SEQ_LEN - ignored:] = IGNORE
    return input_ids, labels


def token_loss_sum(logits, labels):
    """(sum of the valid labels' cross-entropies, number of valid labels) as fp64 tensors."""
    total = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE, reduction="sum")
    return total, (labels != IGNORE).sum().to(torch.float64)
