"""Two training steps of a colocated encoder and language model joined by a bridge, written by hand
on two layouts of one world of 4 ranks (enc=dp4; lm=dp2,cp2), and the same steps in one process,
each dumped with python/magic_dump.py (the encoder's records on the named grid "encoder").

The models (fp64): an encoder over each example's patch features, prefix = proj(gelu(fc(ln(patches)))),
[B, P, F] -> [B, P, d_model]; a causal language model whose first P input positions take the
prefix in place of their token embeddings: token + position embeddings, one pre-LayerNorm block
x += attn(ln1(x)), x += mlp(ln2(x)) (3 heads, GELU MLP), a final LayerNorm and a head. The loss is
the cross-entropy of the text positions (the prefix positions and each row's padding labelled
-100), summed and divided by the batch's number of valid labels.

The layouts: ranks run tp fastest, dp slowest on both sides, so rank r is encoder dp rank r (2 rows
of the batch) and language-model dp rank r // 2 (4 rows), cp rank r % 2. Under context
parallelism (cp) the sequence is 2 cp = 4 zig-zag chunks, cp rank i holding chunks i and 3 - i;
attention all-gathers K and V over the cp group and masks by global positions. The prefix spans
chunk 0 and part of chunk 1, so both cp ranks hold prefix columns.

The bridge (fan-in: each lm dp rank's rows are the outputs of 2 encoder shards) is two Megatron-style
mappings: GatherFromBridgeGroup (forward: the bridge group's encoder shards concatenated in encoder
dp order; backward: this shard's rows) and CopyToCpGroup (forward: identity; backward: the sum over
the lm cp group). Each cp rank's prefix gradient covers its own columns only, so the intra-cp sum
must come before the fan-in's backward. Every rank's loss is its rows' and columns' token sum over
the global label count (partial sums over dp and cp); gradients are summed over every rank (the
encoder's dp group and the lm's dp x cp are both the whole world here); plain SGD.

Records (each step): the patches and the prefix on the encoder's grid, the input ids, the prefix as
the lm rank receives it, the embeddings, the block's output and the logits on the main grid
(dp x cp), the loss; in backward the prefix's gradient as the bridge hands it back to the encoder;
then every parameter's reduced gradient (the lm's, then the encoder's, as backward makes them) and
every update. The single process records the same identities, whole.
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

import paths  # noqa: F401  (python/ on sys.path)
from magic_dump import Dump, partial, replicate, shard, zigzag

PATCHES, FEATURES, ENC_HIDDEN = 6, 8, 10
VOCAB, D_MODEL, N_HEADS, MLP_HIDDEN, SEQ_LEN = 13, 12, 3, 20, 16
HEAD_DIM = D_MODEL // N_HEADS
ENC_DP, LM_DP, CP = 4, 2, 2
WORLD = ENC_DP
BATCH = 8
ENC_ROWS, LM_ROWS = BATCH // ENC_DP, BATCH // LM_DP
IGNORE = -100
IGNORED_PER_ROW = [2, 0, 3, 1, 0, 4, 0, 1]  # padding labels at each row's end: the ranks hold different counts
STEPS, LR = 2, 0.3
BUGS = ("no-intra-cp-sum",)

# Parameter shapes in forward order: the encoder's, then the language model's.
SHAPES = {
    "encoder.ln.weight": (FEATURES,), "encoder.ln.bias": (FEATURES,),
    "encoder.fc.weight": (ENC_HIDDEN, FEATURES), "encoder.fc.bias": (ENC_HIDDEN,),
    "encoder.proj.weight": (D_MODEL, ENC_HIDDEN), "encoder.proj.bias": (D_MODEL,),
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
ENCODER = [name for name in SHAPES if name.startswith("encoder.")]
LM = [name for name in SHAPES if not name.startswith("encoder.")]


def full_parameters(seed=41):
    """Every weight random (gains near 1, biases near 0 but not 0): no gradient term hides."""
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in SHAPES.items():
        noise = torch.randn(shape, generator=generator, dtype=torch.float64)
        if name.rpartition(".")[0].rpartition(".")[2].startswith("ln") and name.endswith("weight"):
            params[name] = 1.0 + 0.2 * noise
        elif name.endswith("bias"):
            params[name] = 0.2 * noise
        else:
            params[name] = 0.5 * noise
    return params


def make_batch(step):
    """(patches [B, P, F], input_ids [B, S], labels [B, S]): the prefix positions' ids are never
    read (the prefix replaces their embeddings) and their labels are ignored, as are each row's
    padding labels."""
    generator = torch.Generator().manual_seed(200 + step)
    patches = torch.randn(BATCH, PATCHES, FEATURES, generator=generator, dtype=torch.float64)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ_LEN + 1), generator=generator)
    input_ids, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    labels[:, :PATCHES] = IGNORE
    for row, ignored in enumerate(IGNORED_PER_ROW):
        if ignored:
            labels[row, SEQ_LEN - ignored:] = IGNORE
    return patches, input_ids, labels


def cp_positions(cp_rank):
    """The global sequence positions cp rank `cp_rank` holds: zig-zag chunks i and 2 cp - 1 - i."""
    chunk = SEQ_LEN // (2 * CP)
    return torch.cat([torch.arange(c * chunk, (c + 1) * chunk) for c in (cp_rank, 2 * CP - 1 - cp_rank)])


def layer_norm(x, p, name, size=D_MODEL):
    return F.layer_norm(x, (size,), p[name + ".weight"], p[name + ".bias"])


def encoder_forward(p, patches):
    """prefix = proj(gelu(fc(ln(patches)))): [rows, P, F] -> [rows, P, d_model]."""
    h = layer_norm(patches, p, "encoder.ln", FEATURES)
    h = F.gelu(F.linear(h, p["encoder.fc.weight"], p["encoder.fc.bias"]))
    return F.linear(h, p["encoder.proj.weight"], p["encoder.proj.bias"])


def lm_forward(p, input_ids, prefix, positions, gather_kv, key_positions):
    """The language model on the columns at global `positions` of its rows: input_ids [b, n] those
    columns' ids, prefix [b, P, d] the rows' whole prefix (each position below P takes its column of
    it). Attention's keys and values are gather_kv of this rank's ([b, heads, n, head_dim] ->
    [b, heads, len(key_positions), head_dim]); returns the logits and the recorded intermediates."""
    seen = {}
    is_prefix = (positions < PATCHES).view(1, -1, 1)
    from_prefix = prefix[:, positions.clamp(max=PATCHES - 1)]  # backward: a scatter into its columns
    seen["embeddings"] = x = torch.where(is_prefix, from_prefix, p["tok_emb"][input_ids]) + p["pos_emb"][positions]
    h = layer_norm(x, p, "ln1")
    b, n, _ = h.shape
    q, k, v = (t.view(b, n, N_HEADS, HEAD_DIM).transpose(1, 2)
               for t in F.linear(h, p["attn.qkv.weight"], p["attn.qkv.bias"]).split(D_MODEL, -1))
    k, v = gather_kv(k), gather_kv(v)
    scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
    future = key_positions.view(1, -1) > positions.view(-1, 1)
    ctx = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v
    x = x + F.linear(ctx.transpose(1, 2).reshape(b, n, D_MODEL), p["attn.proj.weight"], p["attn.proj.bias"])
    h = F.gelu(F.linear(layer_norm(x, p, "ln2"), p["mlp.fc.weight"], p["mlp.fc.bias"]))
    seen["block"] = x = x + F.linear(h, p["mlp.proj.weight"], p["mlp.proj.bias"])
    seen["logits"] = logits = F.linear(layer_norm(x, p, "ln_f"), p["head.weight"])
    return logits, seen


def token_loss_sum(logits, labels):
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE, reduction="sum")


def valid_labels(labels):
    return (labels != IGNORE).sum().to(torch.float64)


def record_step_end(dump, params, grads, placements_of):
    """Each reduced gradient (the lm's, then the encoder's: the order backward makes them), then
    each update in parameter order, applied; placements_of(name) -> (grid, placements)."""
    with torch.no_grad():
        for name in reversed(params):
            grid, placements = placements_of(name)
            dump.record(name, grads[name], kind="reduced_gradient", layer=name.rpartition(".")[0], mesh=grid,
                        placements=placements)
        for name, t in params.items():
            grid, placements = placements_of(name)
            update = -LR * grads[name]
            dump.record(name, update, kind="update", phase="optimizer", order="first",
                        layer=name.rpartition(".")[0], mesh=grid, placements=placements)
            t += update


# ---- the single process ----------------------------------------------------------------------

def reference_run(folder):
    """The whole batch through both models at once; no bridge, no ranks."""
    params = {name: t.requires_grad_() for name, t in full_parameters().items()}
    dump = Dump(folder, run="single-process")
    positions = torch.arange(SEQ_LEN)
    for step in range(STEPS):
        dump.step = step
        patches, input_ids, labels = make_batch(step)
        dump.record("patches", patches, kind="input")
        prefix = encoder_forward(params, patches)
        dump.record("prefix", prefix, kind="activation", layer="encoder")
        prefix.register_hook(lambda g: dump.record("prefix.grad", g, kind="gradient", layer="encoder"))
        dump.record("input_ids", input_ids, kind="input")
        dump.record("prefix.lm", prefix, kind="activation")
        logits, seen = lm_forward(params, input_ids, prefix, positions, lambda t: t, positions)
        for name, tensor in seen.items():
            dump.record(name, tensor, kind="logits" if name == "logits" else "activation")
        loss = token_loss_sum(logits, labels) / valid_labels(labels)
        dump.record("loss", loss, kind="loss")
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        record_step_end(dump, params, grads, lambda name: ("", None))
    dump.close()


# ---- the two layouts -------------------------------------------------------------------------

class Groups:
    """This rank's place on both layouts and its process groups. With enc=dp4 and lm=dp2,cp2 the
    bridge group (the encoder shards that make one lm dp rank's rows, in encoder dp order) holds the
    same ranks as the lm cp group; the two are kept apart, as their roles are."""

    def __init__(self, rank):
        self.enc_dp = rank
        self.lm_dp, self.cp = divmod(rank, CP)
        self.bridge_index = rank % (ENC_DP // LM_DP)  # this encoder shard's place in its bridge group
        # Every rank creates every group, in the same order, as torch.distributed requires.
        for d in range(LM_DP):
            ranks = [d * CP + c for c in range(CP)]
            cp_group, bridge_group = dist.new_group(ranks), dist.new_group(ranks)
            if d == self.lm_dp:
                self.cp_group, self.bridge_group = cp_group, bridge_group


def all_reduce(x, group=None):
    x = x.clone()
    dist.all_reduce(x, group=group)
    return x


def all_gather(x, group, dim):
    pieces = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(pieces, x.contiguous(), group=group)
    return torch.cat(pieces, dim=dim)


class GatherFromBridgeGroup(torch.autograd.Function):
    """The bridge's fan-in. Forward: the bridge group's encoder shards concatenated (dim 0) in
    encoder dp order, this lm dp rank's rows. Backward: this shard's rows of the gradient, which
    the intra-cp sum has made whole (and the same on every rank of the group)."""

    @staticmethod
    def forward(ctx, shard_rows, groups):
        ctx.rows, ctx.index = shard_rows.shape[0], groups.bridge_index
        return all_gather(shard_rows, groups.bridge_group, 0)

    @staticmethod
    def backward(ctx, grad):
        return grad.narrow(0, ctx.index * ctx.rows, ctx.rows), None


class CopyToCpGroup(torch.autograd.Function):
    """Into the lm cp group, where each cp rank uses its own prefix columns. Forward: identity.
    Backward: the sum over the cp group (the intra-cp sum), since each rank's gradient covers its
    own columns only."""

    @staticmethod
    def forward(ctx, prefix, groups):
        ctx.groups = groups
        return prefix

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad, ctx.groups.cp_group), None


class GatherKvFromCpGroup(torch.autograd.Function):
    """Attention's keys or values for every cp rank's queries. Forward: the cp ranks' chunk pairs
    all-gathered along the sequence (dim 2). Backward: the sum over the cp group (every cp rank's
    queries attended to these keys), this rank's chunk kept: a reduce-scatter (gloo has none: an
    all-reduce, each rank keeping its part)."""

    @staticmethod
    def forward(ctx, x, groups):
        ctx.groups, ctx.length = groups, x.shape[2]
        return all_gather(x, groups.cp_group, 2)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad, ctx.groups.cp_group).narrow(2, ctx.groups.cp * ctx.length, ctx.length), None


def bridge(prefix_shard, groups, bug):
    """Encoder shard [2, P, d] -> the lm dp rank's prefix [4, P, d]. bug="no-intra-cp-sum": the
    backward skips the sum over the cp group, so each shard's gradient keeps its own cp rank's
    columns alone."""
    rows = GatherFromBridgeGroup.apply(prefix_shard, groups)
    return rows if bug == "no-intra-cp-sum" else CopyToCpGroup.apply(rows, groups)


def bridge_run(rank, world, folder, bug=None):
    """Both layouts on 4 ranks, dumped on the main grid [dp=2, cp=2] and the named grid
    "encoder" [dp=4]."""
    assert world == WORLD and bug in (None, *BUGS), (world, bug)
    groups = Groups(rank)
    params = {name: t.clone().requires_grad_() for name, t in full_parameters().items()}
    dump = Dump(folder, run="bridge-enc-dp4-lm-dp2-cp2" + (f"-{bug}" if bug else ""),
                mesh=[("dp", LM_DP), ("cp", CP)], meshes={"encoder": [("dp", ENC_DP)]})
    assert dump.coords == [groups.lm_dp, groups.cp] and dump.mesh_coords == {"encoder": [groups.enc_dp]}
    enc_rows = slice(groups.enc_dp * ENC_ROWS, (groups.enc_dp + 1) * ENC_ROWS)
    lm_rows = slice(groups.lm_dp * LM_ROWS, (groups.lm_dp + 1) * LM_ROWS)
    positions = cp_positions(groups.cp)
    key_positions = torch.cat([cp_positions(c) for c in range(CP)])  # the gathered keys' order
    lm_sequence = [shard(0), zigzag(1)]
    for step in range(STEPS):
        dump.step = step
        patches, input_ids, labels = make_batch(step)
        dump.record("patches", patches[enc_rows], kind="input", mesh="encoder", placements=[shard(0)])
        prefix_shard = encoder_forward(params, patches[enc_rows])
        dump.record("prefix", prefix_shard, kind="activation", layer="encoder", mesh="encoder", placements=[shard(0)])
        prefix_shard.register_hook(lambda g: dump.record("prefix.grad", g, kind="gradient", layer="encoder",
                                                         mesh="encoder", placements=[shard(0)]))
        local_ids, local_labels = input_ids[lm_rows][:, positions], labels[lm_rows][:, positions]
        dump.record("input_ids", local_ids, kind="input", placements=lm_sequence)
        prefix = bridge(prefix_shard, groups, bug)
        dump.record("prefix.lm", prefix, kind="activation", placements=[shard(0), replicate()])
        logits, seen = lm_forward(params, local_ids, prefix, positions,
                                  lambda t: GatherKvFromCpGroup.apply(t, groups), key_positions)
        for name, tensor in seen.items():
            dump.record(name, tensor, kind="logits" if name == "logits" else "activation", placements=lm_sequence)
        loss = token_loss_sum(logits, local_labels) / all_reduce(valid_labels(local_labels))
        dump.record("loss", loss, kind="loss", placements=[partial("sum"), partial("sum")])
        local = torch.autograd.grad(loss, list(params.values()))
        # The encoder's dp group and the lm's dp x cp are each the whole world here.
        grads = {name: all_reduce(g) for name, g in zip(params, local)}
        record_step_end(dump, params, grads,
                        lambda name: ("encoder", [replicate()]) if name in ENCODER else ("", [replicate()] * 2))
    dump.close()
