"""Two training steps of a tiny GPT with a tied head run as a two-stage pipeline (GPipe, three
micro-batches of unequal sizes, activations and their gradients sent point to point), and the
same steps in one process, each dumped with python/magic_dump.py.

The model (fp64): token and position embeddings, two pre-LayerNorm blocks (tiny_gpt.Block), a
final LayerNorm, and a head tied to the token embedding: logits = ln_f(x) @ tok_emb.weightᵀ.
Stage 0 holds the embeddings and blocks.0; stage 1 holds blocks.1, ln_f and a copy of the token
embedding for the head. Each copy's gradient is one term of the tied parameter's gradient
(stage 0's from the lookup, stage 1's from the head), so the two are summed over the embedding
group (both stages) before the optimizer: without that sum the copies drift apart.

The loss is each micro-batch's token sum over the number of valid labels in the whole batch. The
mesh is [("pp", 2)]; a stage's tensors are placed on=[its stage], the token embedding's on both.

Records (each step): per micro-batch k the input ids (stage 0), each block's output (its stage),
the logits and the loss term (stage 1), and each parameter's gradient from that micro-batch alone
(the token embedding's a partial sum over the stages); then each reduced gradient and each update.
The single process runs each step's whole batch at once and records micro-batch k's rows and the
gradient of micro-batch k's loss term, so both dumps hold the same records.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import paths  # noqa: F401  (python/ on sys.path)
from magic_dump import Dump, partial, replicate
from reference_steps import record_sgd_step, record_term
from tiny_gpt import D_MODEL, IGNORE, SEQ_LEN, VOCAB, Block, make_batch

STAGES, N_LAYERS = 2, 2
MICRO_ROWS = [3, 3, 2]  # the batch's rows: micro-batch 0, 1, 2 (unequal)
STEPS, LR = 2, 0.3
TIED = "tok_emb.weight"


class TiedGpt(nn.Module):
    """The whole model; a stage is this module with the other stage's parts left out."""

    def __init__(self, stage=None):
        super().__init__()
        first, last = stage in (None, 0), stage in (None, STAGES - 1)
        if first or last:
            self.tok_emb = nn.Embedding(VOCAB, D_MODEL)
        if first:
            self.pos_emb = nn.Embedding(SEQ_LEN, D_MODEL)
        owned = range(N_LAYERS) if stage is None else [stage]  # one block per stage
        self.blocks = nn.ModuleDict({str(i): Block() for i in owned})
        if last:
            self.ln_f = nn.LayerNorm(D_MODEL)

    def embed(self, input_ids):
        return self.tok_emb(input_ids) + self.pos_emb(torch.arange(input_ids.shape[1]))

    def head(self, x):
        return F.linear(self.ln_f(x), self.tok_emb.weight)


def make_model(stage=None, seed=29):
    """The same fp64 weights in every process (every parameter random: no gradient term hides),
    keeping the ones `stage` holds."""
    torch.manual_seed(seed)
    whole = TiedGpt().double()
    with torch.no_grad():
        for name, p in whole.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            else:
                p.copy_(0.5 * torch.randn_like(p))
    if stage is None:
        return whole
    model = TiedGpt(stage).double()
    model.load_state_dict({k: v for k, v in whole.state_dict().items() if k in model.state_dict()})
    return model


def step_batch(step):
    return make_batch(seed=7 + step)


def micro_batch_rows(k):
    start = sum(MICRO_ROWS[:k])
    return list(range(start, start + MICRO_ROWS[k]))


def token_loss_sum(logits, labels):
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE, reduction="sum")


def valid_labels(labels):
    return (labels != IGNORE).sum().to(torch.float64)


# ---- the single process ----------------------------------------------------------------------

def reference_run(folder):
    model = make_model()
    params = dict(model.named_parameters())
    dump = Dump(folder, run="single-process")
    for step in range(STEPS):
        dump.step = step
        input_ids, labels = step_batch(step)
        x = model.embed(input_ids)
        outputs = {}
        for i, block in model.blocks.items():
            outputs[f"blocks.{i}"] = x = block(x)
        logits = model.head(x)
        total = valid_labels(labels)
        grads = {name: torch.zeros_like(p) for name, p in params.items()}
        for k in range(len(MICRO_ROWS)):
            rows = micro_batch_rows(k)
            dump.record("input_ids", input_ids[rows], kind="input", micro_batch=k)
            for name, out in outputs.items():
                dump.record(name, out[rows], kind="activation", layer=name, micro_batch=k)
            dump.record("logits", logits[rows], kind="logits", micro_batch=k)
            record_term(dump, params, token_loss_sum(logits[rows], labels[rows]) / total, k, grads)
        record_sgd_step(dump, params, grads, LR)
    dump.close()


# ---- the pipeline ----------------------------------------------------------------------------

def held(stage, name):
    """The pipeline placement of parameter `name` held by `stage`: the tied embedding's copies on
    both stages, every other parameter on its own."""
    return [replicate(on=[0, STAGES - 1])] if name == TIED else [replicate(on=[stage])]


def pp_run(rank, world, folder, bug=None):
    """GPipe over two stages, dumped on the mesh [("pp", 2)].

    bug="embedding-sum-skipped": each stage steps its copy of the tied embedding with its own
    gradient term, the embedding group's all-reduce left out, while the dump declares the reduced
    gradient replicated over both stages as the optimizer treats it."""
    assert world == STAGES and bug in (None, "embedding-sum-skipped"), (world, bug)
    stage, last = rank, rank == STAGES - 1
    model = make_model(stage)
    params = dict(model.named_parameters())
    dump = Dump(folder, run="pp2-tied" + (f"-{bug}" if bug else ""), mesh=[("pp", STAGES)])
    mine = [replicate(on=[stage])]
    for step in range(STEPS):
        dump.step = step
        input_ids, labels = step_batch(step)
        total = valid_labels(labels)
        grads = {name: torch.zeros_like(p) for name, p in params.items()}
        kept = []  # each micro-batch's (stage input, stage output, loss)
        # Forward: every micro-batch through the stage, each output sent on.
        for k in range(len(MICRO_ROWS)):
            rows = micro_batch_rows(k)
            if stage == 0:
                dump.record("input_ids", input_ids[rows], kind="input", micro_batch=k, placements=mine)
                x_in = model.embed(input_ids[rows])
            else:
                x_in = torch.empty(len(rows), SEQ_LEN, D_MODEL, dtype=torch.float64)
                dist.recv(x_in, src=stage - 1)
                x_in.requires_grad_()
            x = model.blocks[str(stage)](x_in)
            dump.record(f"blocks.{stage}", x, kind="activation", layer=f"blocks.{stage}", micro_batch=k,
                        placements=mine)
            loss = None
            if last:
                logits = model.head(x)
                dump.record("logits", logits, kind="logits", micro_batch=k, placements=mine)
                loss = token_loss_sum(logits, labels[rows]) / total
                dump.record("loss", loss, kind="loss", micro_batch=k, placements=mine)
            else:
                dist.send(x.detach().contiguous(), dst=stage + 1)
            kept.append((x_in, x, loss))
        # Backward, micro-batch by micro-batch: the last stage from its loss, the others from the
        # cotangent of their output received from the next stage.
        for k, (x_in, x, loss) in enumerate(kept):
            inputs = list(params.values()) + ([x_in] if stage > 0 else [])
            if last:
                contribution = torch.autograd.grad(loss, inputs)
            else:
                cotangent = torch.empty_like(x)
                dist.recv(cotangent, src=stage + 1)
                contribution = torch.autograd.grad(x, inputs, grad_outputs=cotangent)
            if stage > 0:
                dist.send(contribution[-1].contiguous(), dst=stage - 1)
            for (name, _), g in zip(reversed(params.items()), reversed(contribution[:len(params)])):
                placement = [partial("sum", on=[0, STAGES - 1])] if name == TIED else mine
                dump.record(name, g, kind="gradient", micro_batch=k, placements=placement)
                grads[name] += g
        with torch.no_grad():
            if bug != "embedding-sum-skipped":
                dist.all_reduce(grads[TIED])  # the embedding group: both stages
            for name in reversed(params):
                dump.record(name, grads[name], kind="reduced_gradient", placements=held(stage, name))
            for name, p in params.items():
                update = -LR * grads[name]
                dump.record(name, update, kind="update", phase="optimizer", order="first",
                            placements=held(stage, name))
                p += update
    dump.close()
