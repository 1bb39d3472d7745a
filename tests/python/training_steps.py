"""One training step of the tiny GPT (forward, loss, backward, gradients), written the ways a team
might write it, each dumped with python/magic_dump.py to its own folder.

Every variant makes the same records in the same order: the batch (input_ids, labels), each
block's output, the logits, the loss and every parameter's gradient as the optimizer would consume
it. The single-process step is the reference; a correct data-parallel step must reproduce it.

The loss is the mean over the whole batch's valid labels, so a rank must normalize its token sum by
the global count (an all-reduce), never by its own: the ranks, and micro-batches, hold different
numbers of valid labels (tiny_gpt.IGNORED_PER_ROW).
"""

import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import paths  # noqa: F401  (python/ on sys.path)
from magic_dump import Dump, partial, replicate, shard
from tiny_gpt import BLOCK_NAMES, IGNORE, make_batch, make_model, token_loss_sum

BATCH_SHARD = [shard(0)]  # rows of the batch split over dp: inputs, activations, logits

# Bug b's parameter: the one a hand-written reduction forgets (as when its list of parameters was
# built before a module was added or replaced).
FORGOTTEN_PARAMETER = "blocks.0.mlp.fc.weight"


def rows_of(rank, world, tensor):
    """This rank's rows of the batch: contiguous, as even as the batch allows (8 over 3: 3, 3, 2)."""
    return torch.tensor_split(tensor, world)[rank]


def global_label_count(count):
    total = count.clone()
    dist.all_reduce(total)
    return total


def reference_step(folder):
    """The whole batch in one process: the plain mean loss and its gradient."""
    model = make_model()
    input_ids, labels = make_batch()
    dump = Dump(folder, run="single-process")
    dump.record("input_ids", input_ids, kind="input")
    dump.record("labels", labels, kind="input")
    with dump.watch_activations(model, BLOCK_NAMES):
        logits = model(input_ids)
    dump.record("logits", logits, kind="logits")
    loss_sum, count = token_loss_sum(logits, labels)
    loss = loss_sum / count
    dump.record("loss", loss, kind="loss")
    loss.backward()
    dump.record_gradients(model)
    dump.close()


def ddp_step(rank, world, folder, bug=None):
    """DistributedDataParallel: DDP averages gradients over ranks, so each rank's loss is its token
    sum over the global label count, times world. That loss is a partial term whose average over
    ranks is the reference loss: placement partial("avg").

    bug="loss-averaged-twice": the loss is averaged per rank (over the rank's own labels) and divided
    by world "to average it over ranks", while DDP averages the gradients again: every gradient
    comes out 1/world of the reference. (On halves holding equal label counts the loss itself still
    sums to the reference loss, so only the gradients show it.)"""
    model = DistributedDataParallel(make_model())
    input_ids, labels = (rows_of(rank, world, t) for t in make_batch())
    dump = Dump(folder, run=f"ddp-world{world}" + (f"-{bug}" if bug else ""))
    dump.record("input_ids", input_ids, kind="input", placements=BATCH_SHARD)
    dump.record("labels", labels, kind="input", placements=BATCH_SHARD)
    with dump.watch_activations(model, BLOCK_NAMES):  # DDP: batch shards, inferred
        logits = model(input_ids)
    dump.record("logits", logits, kind="logits", placements=BATCH_SHARD)
    loss_sum, count = token_loss_sum(logits, labels)
    if bug == "loss-averaged-twice":
        loss = loss_sum / count / world
        dump.record("loss", loss, kind="loss", placements=[partial("sum")])
    else:
        assert bug is None, bug
        loss = loss_sum * world / global_label_count(count)
        dump.record("loss", loss, kind="loss", placements=[partial("avg")])
    loss.backward()
    dump.record_gradients(model)  # DDP after backward: reduced and replicated, inferred
    dump.close()


def sharded_forward_backward(dump, model, input_ids, labels):
    """This rank's rows forward and backward, recorded, under the honest global normalizer:
    the steps that reduce gradients by hand share it."""
    dump.record("input_ids", input_ids, kind="input", placements=BATCH_SHARD)
    dump.record("labels", labels, kind="input", placements=BATCH_SHARD)
    with dump.watch_activations(model, BLOCK_NAMES, placements=BATCH_SHARD):
        logits = model(input_ids)
    dump.record("logits", logits, kind="logits", placements=BATCH_SHARD)
    loss_sum, count = token_loss_sum(logits, labels)
    loss = loss_sum / global_label_count(count)
    dump.record("loss", loss, kind="loss", placements=[partial("sum")])
    loss.backward()


def hand_reduced_step(rank, world, folder, forget=None):
    """A hand-written data parallel: each rank's loss is its token sum over the global label count
    (a partial sum of the reference loss), and an all-reduce sums every gradient.

    forget=FORGOTTEN_PARAMETER: that parameter is left out of the reduction, so each rank keeps its
    own part of its gradient while the dump still declares it reduced and replicated."""
    model = make_model()
    input_ids, labels = (rows_of(rank, world, t) for t in make_batch())
    dump = Dump(folder, run=f"hand-reduced-world{world}" + ("-forgets-a-parameter" if forget else ""))
    sharded_forward_backward(dump, model, input_ids, labels)
    for name, parameter in model.named_parameters():
        if name != forget:
            dist.all_reduce(parameter.grad)
    dump.record_gradients(model, kind="reduced_gradient", placements=[replicate()])
    dump.close()


def accumulation_step(rank, world, folder, micro_batches=2, bug=None):
    """DDP with gradient accumulation: each rank runs its rows as `micro_batches` micro-batches,
    gradients synchronized on the last one only (no_sync). A correct micro-batch loss is its token
    sum over the global label count, times world (DDP averages).

    bug="mean-of-micro-means": each micro-batch's loss is its own mean, and the accumulated sum is
    divided by the number of micro-batches. Where micro-batches hold different numbers of valid
    labels this weighs their tokens differently: not a scaling, the gradient's direction differs."""
    model = DistributedDataParallel(make_model())
    input_ids, labels = (rows_of(rank, world, t) for t in make_batch())
    dump = Dump(folder, run=f"ddp-world{world}-accumulate{micro_batches}" + (f"-{bug}" if bug else ""))
    dump.record("input_ids", input_ids, kind="input", placements=BATCH_SHARD)
    dump.record("labels", labels, kind="input", placements=BATCH_SHARD)
    total = global_label_count((labels != IGNORE).sum().to(torch.float64))
    rank_loss = torch.zeros((), dtype=torch.float64)
    micro = list(zip(input_ids.tensor_split(micro_batches), labels.tensor_split(micro_batches)))
    # concat_dim=0: the micro-batches' outputs join into the rank's rows, one record per block.
    with dump.watch_activations(model, BLOCK_NAMES, concat_dim=0):
        for i, (micro_ids, micro_labels) in enumerate(micro):
            last = i == len(micro) - 1
            with contextlib.nullcontext() if last else model.no_sync():
                logits = model(micro_ids)
                dump.record("logits", logits, kind="logits", placements=BATCH_SHARD, concat_dim=0)
                micro_sum, micro_count = token_loss_sum(logits, micro_labels)
                if bug == "mean-of-micro-means":
                    loss = micro_sum / micro_count / len(micro)
                else:
                    assert bug is None, bug
                    loss = micro_sum * world / total
                loss.backward()
            rank_loss += loss.detach()
    dump.record("loss", rank_loss, kind="loss", placements=[partial("avg")])
    dump.record_gradients(model)
    dump.close()


def uneven_rows(rows, world):
    """Split `rows` over the ranks in proportion 1 : 2 : ... : world (every piece non-empty for
    rows >= world(world+1)/2): deliberately uneven shard sizes. Returns the world+1 boundaries."""
    weight_total = world * (world + 1) // 2
    return [rows * (r * (r + 1) // 2) // weight_total for r in range(world + 1)]


def reduce_scatter_step(rank, world, folder):
    """A hand-written sharded-gradient data parallel (ZeRO-2 style): each rank keeps only its rows of
    every parameter's reduced gradient, in uneven shards (uneven_rows).

    The gradients are flattened into one buffer laid out rank by rank (rank 0's rows of every
    parameter, then rank 1's, ...), so that each rank's part is one contiguous slice, and that
    buffer is reduce-scattered. Gloo in torch 1.13 has no reduce_scatter: it is emulated with an
    all-reduce, each rank keeping its own slice. The dump declares each piece shard(0) of its
    parameter's reduced gradient."""
    model = make_model()
    input_ids, labels = (rows_of(rank, world, t) for t in make_batch())
    dump = Dump(folder, run=f"reduce-scatter-world{world}")
    sharded_forward_backward(dump, model, input_ids, labels)

    grads = {name: p.grad for name, p in model.named_parameters()}
    bounds = {name: uneven_rows(g.shape[0], world) for name, g in grads.items()}
    flat = torch.cat([g[bounds[name][r]:bounds[name][r + 1]].reshape(-1)
                      for r in range(world) for name, g in grads.items()])
    slice_sizes = [sum(g[bounds[name][r]:bounds[name][r + 1]].numel() for name, g in grads.items())
                   for r in range(world)]
    dist.all_reduce(flat)  # reduce_scatter, emulated: the sum everywhere, then each keeps its slice
    mine = flat.split(slice_sizes)[rank]

    offset = 0
    for name, g in grads.items():
        rows = bounds[name][rank + 1] - bounds[name][rank]
        piece = mine[offset:offset + rows * g[0].numel()].view(rows, *g.shape[1:])
        offset += piece.numel()
        dump.record(name, piece, kind="reduced_gradient", layer=name.rpartition(".")[0], placements=[shard(0)])
    dump.close()
