"""What the single-process references of the dump demonstrations record alike: a micro-batch's
loss term with the gradient of that term alone, and a plain SGD step's reduced gradients and
updates (tp_steps.py, pp_steps.py)."""

import torch


def record_term(dump, params, loss, k, grads):
    """Micro-batch k's loss term and each parameter's gradient of it (backward's order: the last
    parameter first), added into `grads`."""
    dump.record("loss", loss, kind="loss", micro_batch=k)
    contribution = torch.autograd.grad(loss, list(params.values()), retain_graph=True)
    for (name, _), g in zip(reversed(params.items()), reversed(contribution)):
        dump.record(name, g, kind="gradient", micro_batch=k)
        grads[name] += g


def record_sgd_step(dump, params, grads, lr):
    """The step's reduced gradients (backward's order), then each update -lr·g, applied."""
    with torch.no_grad():
        for name in reversed(params):
            dump.record(name, grads[name], kind="reduced_gradient")
        for name, p in params.items():
            update = -lr * grads[name]
            dump.record(name, update, kind="update", phase="optimizer", order="first")
            p += update
