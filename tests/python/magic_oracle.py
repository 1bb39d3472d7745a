#!/usr/bin/python3
"""An independent MAGIC in plain PyTorch, written from docs/plan-format.md (not from the C++).

It reads a plan that `magic-run --export-plan DIR` wrote, trains the run it describes with the
optimizer written out as differentiable tensor operations, keeps every state, and computes the
scores dQ/dw by REPLAY: from the query gradient at the last state it walks the steps back, taking
at each the vector-Jacobian product of the whole step (the loss gradient, taken with
create_graph=True so that the product is a double backward, then clipping and the optimizer
update) with respect to the state and to the data weights w, and sums the w parts.

Two ways to run it:

  magic_oracle.py --plan DIR --out scores.safetensors [--plant BUG] [--threads N]
      the oracle alone: writes its scores in magic-run's score-file format, and prints its
      training and REPLAY seconds (bench/pythia_shaped times it against magic-run this way).

  magic_oracle.py --magic-run BIN --compare BIN --config CFG [--config CFG ...]
      the test (ctest's python.magic_oracle): for each config, in a temporary directory, runs
      magic-run with --export-plan and --out, runs the oracle on the plan, and requires the two
      score files to agree to 1e-9 relative (max|a - b| / max|b|), judged here and by
      magic-compare; then plants each bug that applies to the plan in the oracle and requires
      the same comparison to fail. --per-query-config CFG does the same with magic-run's
      --per-query (one row of scores per query). Exit 0 when every requirement holds, 1 otherwise.

Debian's python3-torch (1.13) has no safetensors package, so the files are read and written here.
"""

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import torch

FORMAT = "magic-plan"
VERSIONS = (1,)
TOLERANCE = 1e-9
DTYPES = {"F64": torch.float64, "F32": torch.float32, "I64": torch.int64}
CODES = {v: k for k, v in DTYPES.items()}
SIZES = {"F64": 8, "F32": 4, "I64": 8}
# Bugs the oracle can plant in itself, to show that the comparison can fail. Each names the
# part of the plan it gets wrong; `applies` says whether the plan has that part.
PLANTS = {
    "decay-x2": ("weight decay applied twice as strong",
                 lambda plan: plan["optimizer"]["weight_decay"] != 0),
    "no-clip": ("gradient clipping dropped",
                lambda plan: plan["optimizer"]["clip"] is not None),
    "token-weight-unshifted": ("position j weighted by token j instead of the token j + 1 it predicts",
                               lambda plan: plan["loss"]["weights"] == "per_token"),
    "no-label-smoothing": ("the training loss not label-smoothed",
                           lambda plan: plan["loss"]["label_smoothing"] != 0),
    "rotary-interleaved": ("rotary pairs adjacent columns (GPT-J's form) instead of rotating halves",
                           lambda plan: plan["model"]["positions"] == "rotary"),
    "residual-sequential": ("the parallel residual computed in sequence",
                            lambda plan: plan["model"]["residual"] == "parallel"),
    "gelu-erf": ("the tanh GELU computed with erf",
                 lambda plan: plan["model"]["activation"] == "gelu_tanh"),
    "head-detached": ("the tied head's gradient not reaching tok_emb",
                      lambda plan: plan["model"]["tied_embeddings"]),
}


class PlanError(Exception):
    """The plan is not one this oracle reads, or a file disagrees with plan.json."""


# ---------------------------------------------------------------------------------------------
# safetensors, FNV-1a

def read_safetensors(path):
    """(tensors, metadata) of a safetensors file, each size and offset checked."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise PlanError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise PlanError(f"{path}: header length {n} exceeds the file")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        code = info["dtype"]
        if code not in DTYPES:
            raise PlanError(f"{path}: tensor {name}: dtype {code} is not one a plan holds")
        begin, end = info["data_offsets"]
        shape = list(info["shape"])
        if not 0 <= begin <= end <= len(body) or end - begin != math.prod(shape) * SIZES[code]:
            raise PlanError(f"{path}: tensor {name}: offsets {begin}..{end} do not fit its shape {shape}")
        buffer = bytearray(body[begin:end])  # a writable copy: frombuffer shares memory
        t = torch.frombuffer(buffer, dtype=DTYPES[code]) if buffer else torch.empty(0, dtype=DTYPES[code])
        tensors[name] = t.reshape(shape)
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        blob = t.numpy().tobytes()
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temp = path + ".partial"
    with open(temp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(temp, path)


def fnv1a64(data):
    h = 14695981039346656037
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


# ---------------------------------------------------------------------------------------------
# Reading and checking the plan

def load_plan(folder):
    """plan.json and its three files, with every file checked against what plan.json says."""
    with open(os.path.join(folder, "plan.json"), encoding="utf-8") as f:
        plan = json.load(f)
    if plan.get("format") != FORMAT:
        raise PlanError(f"{folder}/plan.json: format {plan.get('format')!r}, expected {FORMAT!r}")
    if plan.get("version") not in VERSIONS:
        raise PlanError(f"{folder}/plan.json: version {plan.get('version')!r}; this oracle reads versions {VERSIONS}")
    files = {}
    for entry in plan["files"]:
        path = os.path.join(folder, entry["file"])
        with open(path, "rb") as f:
            data = f.read()
        if len(data) != entry["bytes"]:
            raise PlanError(f"{path}: {len(data)} bytes, plan.json says {entry['bytes']}")
        if fnv1a64(data) != entry["fnv1a64"]:
            raise PlanError(f"{path}: FNV-1a {fnv1a64(data)}, plan.json says {entry['fnv1a64']}")
        tensors, _ = read_safetensors(path)
        described = {t["name"]: t for t in entry["tensors"]}
        if set(described) != set(tensors):
            raise PlanError(f"{path}: tensors {sorted(tensors)}, plan.json says {sorted(described)}")
        for name, t in tensors.items():
            if CODES[t.dtype] != described[name]["dtype"] or list(t.shape) != described[name]["shape"]:
                raise PlanError(f"{path}: tensor {name} is {CODES[t.dtype]} {list(t.shape)}, plan.json says "
                                f"{described[name]['dtype']} {described[name]['shape']}")
        files[entry["file"]] = tensors
    for needed in ("init.safetensors", "batches.safetensors", "queries.safetensors"):
        if needed not in files:
            raise PlanError(f"{folder}/plan.json: no entry for {needed}")
    plan_checks(plan, files)
    return plan, files["init.safetensors"], files["batches.safetensors"], files["queries.safetensors"]


def expected_divisor(reduction, targets, ignore):
    """row_divisor [S, B] as the plan's reduction defines it."""
    valid = (targets != ignore).sum(-1).to(torch.float64)  # v[s, b]
    if reduction == "mean":
        return valid.sum(-1, keepdim=True).expand_as(valid)
    if reduction == "sum_of_means":
        return valid.clamp(min=1)
    if reduction == "sum":
        return torch.ones_like(valid)
    raise PlanError(f"loss.reduction {reduction!r}: expected mean, sum_of_means or sum")


def plan_checks(plan, files):
    """What the format promises about the tensors, so that a wrong plan fails here by name."""
    m, d = plan["model"], plan["data"]
    if plan["dtype"]["compute"] != plan["dtype"]["master"] or plan["dtype"]["loss_scale"] != 1:
        raise PlanError(f"dtype {plan['dtype']}: a plan runs one dtype and no loss scale")
    init = files["init.safetensors"]
    for p in m["parameters"]:
        if p["name"] not in init or list(init[p["name"]].shape) != p["shape"]:
            raise PlanError(f"init.safetensors: parameter {p['name']} missing or not {p['shape']}")
    if m["architecture"] != "gpt" or m["activation"] not in ("gelu_erf", "gelu_tanh") or m["dropout"] != 0 \
            or m["head_bias"] or m["positions"] not in ("learned", "rotary") or m["norm"] != "pre_layernorm" \
            or m["residual"] not in ("sequential", "parallel") or m["attention_mask"] != "causal":
        raise PlanError(f"model {m['architecture']}: a variant this oracle does not build")
    if m["positions"] == "rotary" and not (isinstance(m.get("rotary_dims"), int) and 2 <= m["rotary_dims"]
                                           <= m["head_dim"] and m["rotary_dims"] % 2 == 0):
        raise PlanError(f"model.rotary_dims {m.get('rotary_dims')}: expected an even number in 2..head_dim")
    b = files["batches.safetensors"]
    S, B, T, N = plan["training"]["steps"], plan["training"]["batch_size"], d["sequence_length"], d["examples"]
    ignore = plan["loss"]["ignore_target"]
    shapes = {"input_ids": [S, B, T], "targets": [S, B, T], "example_index": [S, B], "row_divisor": [S, B],
              "weights": [N] if plan["loss"]["weights"] == "per_document" else [N, T]}
    for name, shape in shapes.items():
        if list(b[name].shape) != shape:
            raise PlanError(f"batches.safetensors: {name} is {list(b[name].shape)}, expected {shape}")
    if T > m["max_len"] or len(plan["optimizer"]["lr"]) != S or len(d["example_ids"]) != N:
        raise PlanError("plan.json: sequence_length, lr or example_ids disagree with the steps and examples")
    for name, x, t in (("batches", b["input_ids"], b["targets"]),
                       ("queries", files["queries.safetensors"]["input_ids"], files["queries.safetensors"]["targets"])):
        predicted = t[..., :-1] != ignore
        if not torch.equal(t[..., :-1][predicted], x[..., 1:][predicted]) or not (t[..., -1] == ignore).all():
            raise PlanError(f"{name}.safetensors: a target is not the next input token")
    e = b["example_index"]
    if not ((e >= -1) & (e < N)).all() or (b["targets"][e < 0] != ignore).any():
        raise PlanError("batches.safetensors: example_index out of range, or a padding row with a target")
    if not torch.equal(b["row_divisor"].to(torch.float64), expected_divisor(plan["loss"]["reduction"], b["targets"],
                                                                            ignore)):
        raise PlanError(f"batches.safetensors: row_divisor is not what reduction {plan['loss']['reduction']} gives")
    q = files["queries.safetensors"]
    D = plan["queries"]["documents"]
    if set(q["document"].tolist()) != set(range(D)):
        raise PlanError(f"queries.safetensors: documents {sorted(set(q['document'].tolist()))}, expected 0..{D - 1}")


# ---------------------------------------------------------------------------------------------
# The model and the losses (docs/plan-format.md, "The forward", "The loss of a step", "The query loss")

def rotated(model, t, plant=None):
    """q or k [R, H, T, hd] turned on its first rotary_dims columns by position (the rotate-half
    form: column i < r/2 pairs with column i + r/2, both at angle p·base^(−2i/r))."""
    r, T = model["rotary_dims"], t.shape[-2]
    angle = torch.arange(T, dtype=torch.float64)[:, None] * model["rotary_base"] ** (
        -torch.arange(0, r, 2, dtype=torch.float64) / r)
    cos, sin = angle.cos().to(t.dtype), angle.sin().to(t.dtype)
    a, b, kept = t[..., :r // 2], t[..., r // 2:r], t[..., r:]
    if plant == "rotary-interleaved":
        a, b = t[..., 0:r:2], t[..., 1:r:2]
        return torch.cat([torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2), kept], -1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin, kept], -1)


def gpt_logits(model, params, ids, plant=None):
    """The logits [R, T, V]; `plant` (training's forward only) gets one part of the model wrong."""
    R, T = ids.shape
    d, H, hd = model["d_model"], model["n_heads"], model["head_dim"]
    eps = model["layer_norm_eps"]
    rotary = model["positions"] == "rotary"

    def norm(x, name):
        return torch.nn.functional.layer_norm(x, (d,), params[name + ".weight"], params[name + ".bias"], eps)

    def linear(x, name, bias=True):
        y = x @ params[name + ".weight"].t()
        return y + params[name + ".bias"] if bias else y

    def gelu(x):
        tanh = model["activation"] == "gelu_tanh" and plant != "gelu-erf"
        return torch.nn.functional.gelu(x, approximate="tanh" if tanh else "none")

    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # key j after query i

    def attn(x, p):
        h = linear(x, p + "attn.qkv")
        q, k, v = (h[..., i * d:(i + 1) * d].reshape(R, T, H, hd).transpose(1, 2) for i in range(3))
        if rotary:
            q, k = rotated(model, q, plant), rotated(model, k, plant)
        a = (q @ k.transpose(-1, -2)) * model["attention_scale"]
        a = a.masked_fill(future, float("-inf"))
        y = (torch.softmax(a, -1) @ v).transpose(1, 2).reshape(R, T, d)
        return linear(y, p + "attn.proj")

    def mlp(x, p):
        return linear(gelu(linear(x, p + "mlp.fc")), p + "mlp.proj")

    x = params["tok_emb"][ids] if rotary else params["tok_emb"][ids] + params["pos_emb"][:T]
    for l in range(model["n_layers"]):
        p = f"blocks.{l}."
        if model["residual"] == "parallel" and plant != "residual-sequential":
            x = x + attn(norm(x, p + "ln1"), p) + mlp(norm(x, p + "ln2"), p)
        else:
            x = x + attn(norm(x, p + "ln1"), p)
            x = x + mlp(norm(x, p + "ln2"), p)
    head = params["head.weight"] if not model["tied_embeddings"] else \
        params["tok_emb"].detach() if plant == "head-detached" else params["tok_emb"]
    return norm(x, "ln_f") @ head.t()


def token_losses(logits, targets, ignore, label_smoothing=0.0):
    """ℓ[r, j] = -log softmax(logits[r, j])[targets[r, j]], exactly 0 where the target is ignored;
    with label smoothing ε, PyTorch's own cross_entropy(label_smoothing=ε) (ε/V on every class)."""
    if label_smoothing:
        V = logits.shape[-1]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=ignore,
                                                 reduction="none", label_smoothing=label_smoothing
                                                 ).view(targets.shape)
    valid = targets != ignore
    picked = torch.log_softmax(logits, -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, -picked, torch.zeros_like(picked))


def step_loss(plan, params, batches, s, w, plant=None):
    ids, targets, e = batches["input_ids"][s], batches["targets"][s], batches["example_index"][s]
    smoothing = 0.0 if plant == "no-label-smoothing" else plan["loss"]["label_smoothing"]
    losses = token_losses(gpt_logits(plan["model"], params, ids, plant), targets, plan["loss"]["ignore_target"], smoothing)
    padded = torch.cat([w, torch.zeros_like(w[:1])])  # index -1 picks the zero row: padding weighs 0
    row_w = padded[e]
    if plan["loss"]["weights"] == "per_document":
        omega = row_w.unsqueeze(1).expand_as(losses)
    elif plant == "token-weight-unshifted":
        omega = row_w
    else:  # position j is weighted by the token it predicts, j + 1; the last column predicts nothing
        omega = torch.cat([row_w[:, 1:], torch.zeros_like(row_w[:, :1])], 1)
    return ((omega * losses).sum(1) / batches["row_divisor"][s]).sum()


def query_loss(plan, params, queries, which=None):
    """Q (which=None) or Q_which: each document's mean token loss over all its chunks."""
    ignore = plan["loss"]["ignore_target"]
    losses = token_losses(gpt_logits(plan["model"], params, queries["input_ids"]), queries["targets"], ignore)
    D = plan["queries"]["documents"]
    doc = queries["document"]
    per_doc = torch.zeros(D, dtype=losses.dtype).index_add(0, doc, losses.sum(1))
    valid = (queries["targets"] != ignore).sum(1).to(losses.dtype)
    counts = torch.zeros(D, dtype=losses.dtype).index_add(0, doc, valid)
    means = per_doc / counts
    return means.mean() if which is None else means[which]


# ---------------------------------------------------------------------------------------------
# One training step as a differentiable function of the state and w

class Step:
    """s_{t+1} = step(s_t, w): the loss gradient, clipping, the optimizer update."""

    def __init__(self, plan, names, batches, plant=None):
        self.plan, self.names, self.batches, self.plant = plan, names, batches, plant
        o = plan["optimizer"]
        self.opt = o
        if o["name"] not in ("sgd", "adam", "adamw"):
            raise PlanError(f"optimizer.name {o['name']!r}: expected sgd, adam or adamw")
        self.slots = {"sgd": ["trace"] if o.get("momentum", 0) > 0 else [], "adam": ["m", "v"],
                      "adamw": ["m", "v"]}[o["name"]]
        # l2: wd·θ joins the gradient (after clipping); decoupled: wd·θ joins Adam's update.
        self.decoupled = {"l2": False, "decoupled": True}[o["weight_decay_mode"]]
        if self.decoupled and o["name"] == "sgd":
            raise PlanError("optimizer: decoupled weight decay is defined for adam and adamw only")
        self.clipped = {}  # step -> whether clipping scaled its gradient (c < 1)

    def initial_state(self, theta):
        return {"theta": theta, **{slot: [torch.zeros_like(p) for p in theta] for slot in self.slots}}

    def __call__(self, state, w, s, create_graph):
        theta = state["theta"]
        params = dict(zip(self.names, theta))
        loss = step_loss(self.plan, params, self.batches, s, w, self.plant)
        g = list(torch.autograd.grad(loss, theta, create_graph=create_graph))
        clip = self.opt["clip"]
        if clip is not None and self.plant != "no-clip":
            n = torch.sqrt(sum((x * x).sum() for x in g))
            c = torch.clamp(clip["max_norm"] / (n + clip["epsilon"]), max=1.0)
            self.clipped[s] = bool(c < 1)
            g = [c * x for x in g]
        return self.update(state, g, s)

    def update(self, state, g, s):
        o, k, lr = self.opt, s, self.opt["lr"][s]  # the plan's run is at update count s at step s
        wd = o["weight_decay"] * (2 if self.plant == "decay-x2" else 1)
        theta, new = state["theta"], {"theta": []}
        for slot in self.slots:
            new[slot] = []
        for i, p in enumerate(theta):
            gi = g[i]
            if wd != 0 and not self.decoupled:
                gi = gi + wd * p
            if o["name"] == "sgd":
                u = gi
                if o["momentum"] > 0:
                    t = gi if k == 0 else o["momentum"] * state["trace"][i] + (1 - o["dampening"]) * gi
                    new["trace"].append(t)
                    u = gi + o["momentum"] * t if o["nesterov"] else t
            else:
                c = k + 1
                m = o["beta1"] * state["m"][i] + (1 - o["beta1"]) * gi
                v = o["beta2"] * state["v"][i] + (1 - o["beta2"]) * gi * gi
                u = (m / (1 - o["beta1"] ** c)) / (torch.sqrt(v / (1 - o["beta2"] ** c) + o["eps_root"]) + o["eps"])
                if wd != 0 and self.decoupled:
                    u = u + wd * p
                new["m"].append(m)
                new["v"].append(v)
            new["theta"].append(p - lr * u)
        return new


def flat(state, keys):
    return [t for key in keys for t in state[key]]


def unflat(tensors, keys, count):
    return {key: list(tensors[i * count:(i + 1) * count]) for i, key in enumerate(keys)}


# ---------------------------------------------------------------------------------------------
# Training and REPLAY

def magic_scores(plan, init, batches, queries, plant=None):
    """(scores, facts): dQ/dw at the plan's w by REPLAY, and what the run did."""
    names = [p["name"] for p in plan["model"]["parameters"]]
    dtype = DTYPES["F64"] if plan["dtype"]["master"] == "fp64" else DTYPES["F32"]
    theta0 = [init[n].to(dtype) for n in names]
    w = batches["weights"].to(dtype)
    step = Step(plan, names, batches, plant)
    S = plan["training"]["steps"]
    keys = ["theta"] + step.slots
    count = len(names)

    # Forward training, every state kept (the plan's runs are small; magic-run keeps checkpoints).
    start = time.perf_counter()
    states = [step.initial_state(theta0)]
    for s in range(S):
        leaves = {key: [t.detach().requires_grad_(key == "theta") for t in states[-1][key]] for key in keys}
        nxt = step(leaves, w, s, create_graph=False)
        states.append({key: [t.detach() for t in nxt[key]] for key in keys})
    train_seconds = time.perf_counter() - start

    per_query = plan["queries"]["per_query"]
    targets = list(range(plan["queries"]["documents"])) if per_query else [None]
    rows = []
    start = time.perf_counter()
    for which in targets:
        theta_S = [t.detach().requires_grad_(True) for t in states[S]["theta"]]
        lam = {"theta": list(torch.autograd.grad(query_loss(plan, dict(zip(names, theta_S)), queries, which), theta_S))}
        for slot in step.slots:
            lam[slot] = [torch.zeros_like(t) for t in states[S][slot]]
        score = torch.zeros_like(w)
        for s in reversed(range(S)):
            leaves = {key: [t.detach().requires_grad_(True) for t in states[s][key]] for key in keys}
            w_leaf = w.detach().requires_grad_(True)
            nxt = step(leaves, w_leaf, s, create_graph=True)
            inputs = flat(leaves, keys) + [w_leaf]
            products = torch.autograd.grad(flat(nxt, keys), inputs, grad_outputs=flat(lam, keys), allow_unused=True)
            products = [torch.zeros_like(x) if p is None else p for p, x in zip(products, inputs)]
            lam = unflat(products[:-1], keys, count)
            score = score + products[-1]
        rows.append(score)
    replay_seconds = time.perf_counter() - start
    scores = torch.stack(rows) if per_query else rows[0]
    clipped = sorted(s for s, c in step.clipped.items() if c)
    return scores.detach(), {"train_seconds": train_seconds, "replay_seconds": replay_seconds, "clipped": clipped,
                             "steps": S}


def write_scores(path, plan, scores):
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    metadata = {"example_ids": json.dumps(plan["data"]["example_ids"], **compact)}
    if plan["queries"]["per_query"]:
        metadata["query_ids"] = json.dumps(plan["queries"]["ids"], **compact)
    if list(scores.shape) != plan["scores"]["shape"]:
        raise PlanError(f"scores are {list(scores.shape)}, plan.json says {plan['scores']['shape']}")
    write_safetensors(path, {plan["scores"]["tensor"]: scores.to(DTYPES[plan["scores"]["dtype"]])}, metadata)


def run_oracle(plan_dir, out, plant=None):
    plan, init, batches, queries = load_plan(plan_dir)
    scores, facts = magic_scores(plan, init, batches, queries, plant)
    write_scores(out, plan, scores)
    return plan, facts


# ---------------------------------------------------------------------------------------------
# The test: magic-run's plan and scores against the oracle's

def relative_error(a_path, b_path):
    a, _ = read_safetensors(a_path)
    b, _ = read_safetensors(b_path)
    a, b = a["scores"].to(torch.float64), b["scores"].to(torch.float64)
    if a.shape != b.shape:
        raise PlanError(f"{a_path} is {list(a.shape)} but {b_path} is {list(b.shape)}")
    return ((a - b).abs().max() / b.abs().max()).item()


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def check_config(args, config, per_query, failures):
    name = os.path.basename(config) + (" --per-query" if per_query else "")
    with tempfile.TemporaryDirectory(prefix="magic-oracle-") as tmp:
        plan_dir, out_dir = os.path.join(tmp, "plan"), os.path.join(tmp, "run")
        start = time.time()
        r = run([args.magic_run, "--config", config, "--export-plan", plan_dir, "--out", out_dir, "--top", "0"] +
                (["--per-query"] if per_query else []))
        run_seconds = time.time() - start
        if r.returncode != 0:
            failures.append(f"{name}: magic-run exited {r.returncode}:\n{r.stdout}")
            return
        theirs = os.path.join(out_dir, "scores.safetensors")
        mine = os.path.join(tmp, "oracle", "scores.safetensors")
        start = time.time()
        plan, facts = run_oracle(plan_dir, mine)
        oracle_seconds = time.time() - start
        err = relative_error(mine, theirs)
        diff = run([args.compare, mine, theirs, "--tolerance", str(TOLERANCE)])
        o = plan["optimizer"]
        clipping = f"clipping fired at steps {facts['clipped']}" if o["clip"] else "no clipping"
        eps = plan["loss"]["label_smoothing"]
        smoothing = f", label smoothing {eps:g}" if eps else ""
        print(f"{name}: {plan['data']['examples']} examples, {facts['steps']} steps of "
              f"{plan['training']['batch_size']}, {o['name']}, {plan['loss']['reduction']}, "
              f"{plan['loss']['weights']}{smoothing}, scores {plan['scores']['shape']}; {clipping}")
        print(f"  oracle vs magic-run: relative error {err:.3e} (tolerance {TOLERANCE:g}); "
              f"magic-run {run_seconds:.1f} s, oracle {oracle_seconds:.1f} s "
              f"(training {facts['train_seconds']:.1f} s, REPLAY {facts['replay_seconds']:.1f} s)")
        verdict = [line for line in diff.stdout.splitlines() if line.startswith(("PASS", "FAIL", "no divergence"))]
        print("  magic-compare: " + "; ".join(verdict))
        if not err <= TOLERANCE:
            failures.append(f"{name}: the oracle's scores are {err:.3e} from magic-run's, above {TOLERANCE:g}")
        if diff.returncode != 0:
            failures.append(f"{name}: magic-compare exited {diff.returncode}, expected 0")
        if o["clip"] is not None and not 0 < len(facts["clipped"]) < facts["steps"]:
            failures.append(f"{name}: clipping fired at steps {facts['clipped']} of {facts['steps']}: the fixture must "
                            f"clip some steps and not others, so that both branches are checked")
        # Each bug that applies must make the same comparison fail.
        for bug, (what, applies) in PLANTS.items():
            if not applies(plan):
                continue
            planted = os.path.join(tmp, f"oracle-{bug}", "scores.safetensors")
            scores, _ = magic_scores(plan, *load_plan(plan_dir)[1:], plant=bug)
            write_scores(planted, plan, scores)
            bad = relative_error(planted, theirs)
            diff = run([args.compare, planted, theirs, "--tolerance", str(TOLERANCE)])
            caught = bad > TOLERANCE and diff.returncode == 1
            print(f"  planted {bug} ({what}): relative error {bad:.3e}, magic-compare exit {diff.returncode}: "
                  f"{'caught' if caught else 'NOT CAUGHT'}")
            if not caught:
                failures.append(f"{name}: the planted bug {bug} ({what}) was not caught (relative error {bad:.3e}, "
                                f"magic-compare exit {diff.returncode})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", help="a plan folder (magic-run --export-plan DIR)")
    parser.add_argument("--out", help="with --plan: the score file to write")
    parser.add_argument("--plant", choices=sorted(PLANTS), help="with --plan: plant this bug in the oracle")
    parser.add_argument("--threads", type=int, default=1, help="with --plan: torch's intra-op threads (1)")
    parser.add_argument("--magic-run", help="the test: the magic-run binary")
    parser.add_argument("--compare", help="the test: the magic-compare binary")
    parser.add_argument("--config", action="append", default=[], help="the test: a run config (repeatable)")
    parser.add_argument("--per-query-config", action="append", default=[],
                        help="the test: a run config to run with --per-query (repeatable)")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: expected 1 or more")
    torch.set_num_threads(args.threads if args.plan else 1)
    try:
        if args.plan:
            if not args.out:
                parser.error("--plan needs --out")
            plan, facts = run_oracle(args.plan, args.out, args.plant)
            print(f"wrote {args.out}: {plan['scores']['shape']} scores; training {facts['train_seconds']:.3f} s, "
                  f"REPLAY {facts['replay_seconds']:.3f} s; clipping fired at steps {facts['clipped']}; "
                  f"threads={torch.get_num_threads()}")
            return 0
        if not (args.magic_run and args.compare and (args.config or args.per_query_config)):
            parser.error("give --plan and --out, or --magic-run, --compare and --config")
        failures = []
        for config in args.config:
            check_config(args, config, False, failures)
        for config in args.per_query_config:
            check_config(args, config, True, failures)
        for f in failures:
            print("FAIL: " + f)
        print("PASS" if not failures else f"FAIL: {len(failures)} requirement(s) not met")
        return 0 if not failures else 1
    except (PlanError, OSError, KeyError, ValueError) as e:
        print(f"magic_oracle: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
