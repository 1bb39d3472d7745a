"""Two training steps of a one-block transformer written by hand with tensor parallelism (Megatron
style) and gradient accumulation, and the same steps in one process, each dumped with
python/magic_dump.py.

The model (fp64): token and position embeddings, a pre-LayerNorm block x += attn(ln1(x)),
x += mlp(ln2(x)) with causal attention of 4 heads and a GELU MLP, a final LayerNorm and a head.
Under tensor parallelism (tp) the attention's heads are split over the tp ranks (the fused qkv
weight column-parallel, each of q, k and v split by heads; the output projection row-parallel), the
MLP's hidden units too (fc column-parallel, proj row-parallel), and each row-parallel layer's bias is
added once, after the all-reduce. The head is vocabulary-parallel: its 13 rows padded to 14 and split
over tp, its logits all-gathered before the loss. The layer norms and embeddings are replicated. With
sequence parallelism (sp) the block's layer norms and residual stream hold a sequence shard on each
tp rank: an all-gather before each column-parallel layer, a reduce-scatter after each row-parallel
one, and the gradients of what acts on a sequence shard (the layer norms, the row-parallel biases)
are partial sums that an all-reduce over tp completes.

The mesh is dp x tp (2 x 2, ranks row-major). Each dp rank's rows run as two micro-batches of
unequal sizes (3 rows, then 2) whose gradients accumulate; the loss is each micro-batch's token
sum over the number of valid labels in the whole batch (dp ranks and micro-batches hold different
numbers). Plain SGD, two steps, a new batch each step.

Records (each step): per micro-batch k (micro_batch=k) the inputs, the block's intermediate
tensors, the logits, the micro-batch's loss term and each parameter's gradient from that
micro-batch alone; then each reduced gradient and each update (micro_batch -1). The single process
runs each step's whole batch at once and records micro-batch k's rows and terms of it, so that
both dumps hold the same records.
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

import paths  # noqa: F401  (python/ on sys.path)
from magic_dump import Dump, partial, replicate, shard
from reference_steps import record_sgd_step, record_term

VOCAB, D_MODEL, N_HEADS, MLP_HIDDEN, SEQ_LEN = 13, 12, 4, 20, 6
HEAD_DIM = D_MODEL // N_HEADS
DP, TP = 2, 2
ROWS_PER_DP_RANK = 5
MICRO_ROWS = [3, 2]  # each dp rank's rows: micro-batch 0, then 1 (unequal)
BATCH = DP * ROWS_PER_DP_RANK
IGNORE = -100
IGNORED_PER_ROW = [2, 0, 1, 4, 0, 0, 3, 1, 0, 2]  # padding labels at each row's end
STEPS, LR = 2, 0.3

# What each layer norm (under sp) and row-parallel bias acts on: a sequence shard, so its gradient
# is a partial sum over tp.
SEQUENCE_PARALLEL = ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attn.proj.bias", "mlp.proj.bias")
LAYER_NORMS = ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias")

# Parameter shapes, in the order backward meets them reversed (named_parameters order).
SHAPES = {
    "tok_emb": (VOCAB, D_MODEL), "pos_emb": (SEQ_LEN, D_MODEL),
    "ln1.weight": (D_MODEL,), "ln1.bias": (D_MODEL,),
    "attn.qkv.weight": (3 * D_MODEL, D_MODEL), "attn.qkv.bias": (3 * D_MODEL,),
    "attn.proj.weight": (D_MODEL, D_MODEL), "attn.proj.bias": (D_MODEL,),
    "ln2.weight": (D_MODEL,), "ln2.bias": (D_MODEL,),
    "mlp.fc.weight": (MLP_HIDDEN, D_MODEL), "mlp.fc.bias": (MLP_HIDDEN,),
    "mlp.proj.weight": (D_MODEL, MLP_HIDDEN), "mlp.proj.bias": (D_MODEL,),
    "ln_f.weight": (D_MODEL,), "ln_f.bias": (D_MODEL,),
    "head.weight": (VOCAB, D_MODEL),
}


def full_parameters(seed=31):
    """Every weight random (gains near 1, biases near 0 but not 0): no gradient term hides."""
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in SHAPES.items():
        noise = torch.randn(*shape, generator=generator, dtype=torch.float64)
        if name.startswith("ln") and name.endswith("weight"):
            params[name] = 1.0 + 0.2 * noise
        elif name.endswith("bias"):
            params[name] = 0.2 * noise
        else:
            params[name] = 0.5 * noise
    return params


def make_batch(step):
    generator = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ_LEN + 1), generator=generator)
    input_ids, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    for row, ignored in enumerate(IGNORED_PER_ROW):
        if ignored:
            labels[row, SEQ_LEN - ignored:] = IGNORE
    return input_ids, labels


def micro_batch_rows(dp_rank, k):
    """The batch rows dp rank `dp_rank` runs as micro-batch k."""
    start = dp_rank * ROWS_PER_DP_RANK + sum(MICRO_ROWS[:k])
    return list(range(start, start + MICRO_ROWS[k]))


def token_loss_sum(logits, labels):
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE, reduction="sum")


def valid_labels(labels):
    return (labels != IGNORE).sum().to(torch.float64)


def causal_attention(q, k, v):
    """q, k, v [b, heads, s, head_dim] -> [b, heads, s, head_dim]."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
    future = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


def heads(t, n):
    b, s, _ = t.shape
    return t.view(b, s, n, HEAD_DIM).transpose(1, 2)


def layer_norm(x, p, name):
    return F.layer_norm(x, (D_MODEL,), p[name + ".weight"], p[name + ".bias"])


# ---- the single process ----------------------------------------------------------------------

def reference_forward(p, input_ids):
    """The whole model with full weights; returns the logits and the recorded intermediates."""
    seen = {}
    x = p["tok_emb"][input_ids] + p["pos_emb"][:input_ids.shape[1]]
    seen["ln1"] = h = layer_norm(x, p, "ln1")
    q, k, v = (heads(t, N_HEADS) for t in F.linear(h, p["attn.qkv.weight"], p["attn.qkv.bias"]).split(D_MODEL, -1))
    seen["attn.heads"] = ctx = causal_attention(q, k, v)
    seen["attn.proj.partial"] = out = F.linear(ctx.transpose(1, 2).reshape(*x.shape), p["attn.proj.weight"])
    seen["attn"] = out = out + p["attn.proj.bias"]
    x = x + out
    seen["mlp.fc"] = fc = F.linear(layer_norm(x, p, "ln2"), p["mlp.fc.weight"], p["mlp.fc.bias"])
    seen["mlp.proj.partial"] = out = F.linear(F.gelu(fc), p["mlp.proj.weight"])
    x = x + out + p["mlp.proj.bias"]
    seen["block"] = x
    seen["logits"] = logits = F.linear(layer_norm(x, p, "ln_f"), p["head.weight"])
    return logits, seen


def reference_run(folder):
    """Each step's whole batch in one forward; micro-batch k's records are its rows (dp rank 0's
    micro-batch k, then dp rank 1's), its loss term and the gradient of that term alone."""
    params = {name: t.requires_grad_() for name, t in full_parameters().items()}
    dump = Dump(folder, run="single-process")
    for step in range(STEPS):
        dump.step = step
        input_ids, labels = make_batch(step)
        logits, seen = reference_forward(params, input_ids)
        total = valid_labels(labels)
        grads = {name: torch.zeros_like(t) for name, t in params.items()}
        for k in range(len(MICRO_ROWS)):
            rows = micro_batch_rows(0, k) + micro_batch_rows(1, k)
            dump.record("input_ids", input_ids[rows], kind="input", micro_batch=k)
            for name, tensor in seen.items():
                dump.record(name, tensor[rows], kind="logits" if name == "logits" else "activation", micro_batch=k)
            record_term(dump, params, token_loss_sum(logits[rows], labels[rows]) / total, k, grads)
        record_sgd_step(dump, params, grads, LR)
    dump.close()


# ---- tensor parallel -------------------------------------------------------------------------

class Groups:
    """This rank's coordinates on the dp x tp mesh and its dp and tp process groups."""

    def __init__(self, rank):
        self.dp, self.tp = divmod(rank, TP)
        # Every rank creates every group, in the same order, as torch.distributed requires.
        for t in range(TP):
            group = dist.new_group([d * TP + t for d in range(DP)])
            if t == self.tp:
                self.dp_group = group
        for d in range(DP):
            group = dist.new_group([d * TP + t for t in range(TP)])
            if d == self.dp:
                self.tp_group = group


def all_reduce(x, group):
    x = x.clone()
    dist.all_reduce(x, group=group)
    return x


def all_gather(x, group, dim):
    pieces = [torch.empty_like(x) for _ in range(TP)]
    dist.all_gather(pieces, x.contiguous(), group=group)
    return torch.cat(pieces, dim=dim)


def own_chunk(x, tp, dim):
    return x.chunk(TP, dim=dim)[tp].contiguous()


class CopyToTp(torch.autograd.Function):
    """Entering a column-parallel layer: identity forward; backward sums the tp ranks' input gradients."""

    @staticmethod
    def forward(ctx, x, groups):
        ctx.groups = groups
        return x

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad, ctx.groups.tp_group), None


class ReduceFromTp(torch.autograd.Function):
    """Leaving a row-parallel layer: the partial outputs summed; backward passes the gradient on."""

    @staticmethod
    def forward(ctx, x, groups):
        return all_reduce(x, groups.tp_group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GatherSequence(torch.autograd.Function):
    """sp, entering a column-parallel layer: the sequence shards all-gathered (dim 1); backward
    reduce-scatters (gloo has no reduce_scatter: an all-reduce, each rank keeping its chunk)."""

    @staticmethod
    def forward(ctx, x, groups):
        ctx.groups = groups
        return all_gather(x, groups.tp_group, 1)

    @staticmethod
    def backward(ctx, grad):
        return own_chunk(all_reduce(grad, ctx.groups.tp_group), ctx.groups.tp, 1), None


class ReduceScatterSequence(torch.autograd.Function):
    """sp, leaving a row-parallel layer: the partial outputs summed, each rank keeping its sequence
    chunk; backward all-gathers."""

    @staticmethod
    def forward(ctx, x, groups):
        ctx.groups = groups
        return own_chunk(all_reduce(x, groups.tp_group), groups.tp, 1)

    @staticmethod
    def backward(ctx, grad):
        return all_gather(grad, ctx.groups.tp_group, 1), None


class SplitSequence(torch.autograd.Function):
    """sp, entering the block from replicated code: keep this rank's chunk; backward all-gathers."""

    @staticmethod
    def forward(ctx, x, groups):
        ctx.groups = groups
        return own_chunk(x, groups.tp, 1)

    @staticmethod
    def backward(ctx, grad):
        return all_gather(grad, ctx.groups.tp_group, 1), None


class GatherForReplicated(torch.autograd.Function):
    """Into code every tp rank runs alike (leaving the block under sp: dim 1; the vocabulary-parallel
    head's logits: dim 2): all-gather; backward keeps this rank's chunk, since every tp rank
    computes the same gradient of the gathered tensor."""

    @staticmethod
    def forward(ctx, x, groups, dim):
        ctx.groups, ctx.dim = groups, dim
        return all_gather(x, groups.tp_group, dim)

    @staticmethod
    def backward(ctx, grad):
        return own_chunk(grad, ctx.groups.tp, ctx.dim), None, None


def tp_slice(name, full, tp):
    """Tensor-parallel rank tp's piece of a full parameter, and its tp placement (sp aside)."""
    d, m = D_MODEL // TP, MLP_HIDDEN // TP
    if name in ("attn.qkv.weight", "attn.qkv.bias"):  # q, k, v each split by heads
        return torch.cat([full[j * D_MODEL + tp * d:j * D_MODEL + (tp + 1) * d] for j in range(3)]), shard(0, parts=3)
    if name == "attn.proj.weight":
        return full[:, tp * d:(tp + 1) * d], shard(1)
    if name in ("mlp.fc.weight", "mlp.fc.bias"):
        return full[tp * m:(tp + 1) * m], shard(0)
    if name == "mlp.proj.weight":
        return full[:, tp * m:(tp + 1) * m], shard(1)
    if name == "head.weight":  # padded with zero rows to a multiple of tp, then split
        v = -(-VOCAB // TP)
        padded = torch.cat([full, torch.zeros(v * TP - VOCAB, D_MODEL, dtype=full.dtype)])
        return padded[tp * v:(tp + 1) * v], shard(0, length=VOCAB)
    return full, replicate()


def tp_forward(p, input_ids, groups, sp):
    """This rank's forward; returns the logits (replicated over tp) and the recorded intermediates
    with their tp placements."""
    seen = {}
    sequence = shard(1) if sp else replicate()  # the residual stream inside the block
    x = p["tok_emb"][input_ids] + p["pos_emb"][:input_ids.shape[1]]
    if sp:
        x = SplitSequence.apply(x, groups)
    h = layer_norm(x, p, "ln1")
    seen["ln1"] = (h, sequence)
    h = GatherSequence.apply(h, groups) if sp else CopyToTp.apply(h, groups)
    local_heads = N_HEADS // TP
    q, k, v = (heads(t, local_heads) for t in
               F.linear(h, p["attn.qkv.weight"], p["attn.qkv.bias"]).split(D_MODEL // TP, -1))
    ctx = causal_attention(q, k, v)
    seen["attn.heads"] = (ctx, shard(1))
    out = F.linear(ctx.transpose(1, 2).reshape(*h.shape[:2], D_MODEL // TP), p["attn.proj.weight"])
    seen["attn.proj.partial"] = (out, partial("sum"))
    out = (ReduceScatterSequence if sp else ReduceFromTp).apply(out, groups) + p["attn.proj.bias"]
    seen["attn"] = (out, sequence)
    x = x + out
    h = layer_norm(x, p, "ln2")
    h = GatherSequence.apply(h, groups) if sp else CopyToTp.apply(h, groups)
    fc = F.linear(h, p["mlp.fc.weight"], p["mlp.fc.bias"])
    seen["mlp.fc"] = (fc, shard(2))
    out = F.linear(F.gelu(fc), p["mlp.proj.weight"])
    seen["mlp.proj.partial"] = (out, partial("sum"))
    x = x + (ReduceScatterSequence if sp else ReduceFromTp).apply(out, groups) + p["mlp.proj.bias"]
    seen["block"] = (x, sequence)
    if sp:
        x = GatherForReplicated.apply(x, groups, 1)
    # The head is vocabulary-parallel: the vocabulary padded to a multiple of tp, each rank its rows.
    local = F.linear(CopyToTp.apply(layer_norm(x, p, "ln_f"), groups), p["head.weight"])
    seen["logits"] = (local, shard(2, length=VOCAB))
    logits = GatherForReplicated.apply(local, groups, 2)[..., :VOCAB]
    return logits, seen


def tp_run(rank, world, folder, sp=False, bug=None):
    """dp x tp with micro-batches, dumped on the mesh [("dp", 2), ("tp", 2)].

    bug="layer-norm-left-unreduced" (with sp): the layer norms' gradients, partial sums over the tp
    ranks' sequence shards, are left out of the all-reduce over tp, while the dump declares the
    reduced gradient replicated as the optimizer treats it.
    bug="loss-per-micro-batch": each micro-batch's loss is normalized by its own valid labels (over
    dp) and the micro-batches' losses averaged: tokens of the two micro-batches weigh differently."""
    assert world == DP * TP and bug in (None, "layer-norm-left-unreduced", "loss-per-micro-batch"), (world, bug)
    groups = Groups(rank)
    params, tp_placement = {}, {}
    for name, full in full_parameters().items():
        piece, placement = tp_slice(name, full, groups.tp)
        params[name] = piece.clone().requires_grad_()
        tp_placement[name] = partial("sum") if sp and name in SEQUENCE_PARALLEL else placement
    dump = Dump(folder, run=f"dp2-tp2{'-sp' if sp else ''}" + (f"-{bug}" if bug else ""), mesh=[("dp", DP), ("tp", TP)])
    for step in range(STEPS):
        dump.step = step
        input_ids, labels = make_batch(step)
        micro = [micro_batch_rows(groups.dp, k) for k in range(len(MICRO_ROWS))]
        total = all_reduce(valid_labels(labels[sum(micro, [])]), groups.dp_group)
        grads = {name: torch.zeros_like(t) for name, t in params.items()}
        for k, rows in enumerate(micro):
            dump.record("input_ids", input_ids[rows], kind="input", micro_batch=k, placements=[shard(0), replicate()])
            logits, seen = tp_forward(params, input_ids[rows], groups, sp)
            for name, (tensor, placement) in seen.items():
                dump.record(name, tensor, kind="logits" if name == "logits" else "activation", micro_batch=k,
                            placements=[shard(0), placement])
            if bug == "loss-per-micro-batch":
                normalizer = all_reduce(valid_labels(labels[rows]), groups.dp_group) * len(micro)
            else:
                normalizer = total
            loss = token_loss_sum(logits, labels[rows]) / normalizer
            dump.record("loss", loss, kind="loss", micro_batch=k, placements=[partial("sum"), replicate()])
            contribution = torch.autograd.grad(loss, list(params.values()))
            for (name, _), g in zip(reversed(params.items()), reversed(contribution)):
                dump.record(name, g, kind="gradient", micro_batch=k, placements=[partial("sum"), tp_placement[name]])
                grads[name] += g
        with torch.no_grad():
            for name in reversed(params):
                g = all_reduce(grads[name], groups.dp_group)
                forgotten = bug == "layer-norm-left-unreduced" and name in LAYER_NORMS
                if sp and name in SEQUENCE_PARALLEL and not forgotten:
                    g = all_reduce(g, groups.tp_group)
                grads[name] = g
                reduced = replicate() if tp_placement[name]["type"] == "partial" else tp_placement[name]
                dump.record(name, g, kind="reduced_gradient", placements=[replicate(), reduced])
            for name, t in params.items():
                update = -LR * grads[name]
                reduced = replicate() if tp_placement[name]["type"] == "partial" else tp_placement[name]
                dump.record(name, update, kind="update", phase="optimizer", order="first",
                            placements=[replicate(), reduced])
                t += update
    dump.close()
