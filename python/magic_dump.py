"""magic_dump: write what a PyTorch run computed as a magic-dump folder that magic-compare reads.

The format is docs/dump-format.md, version 2 (version 3 when named meshes are declared, 4 when a
placement names the coordinates that hold a piece): a folder
with one safetensors file per rank (rank0.safetensors, ...) holding each rank's piece of every
recorded tensor, and manifest.json, written last, that lists the ranks' mesh coordinates and every
record (name, kind, phase, order, step, micro-batch, layer, dtype, full shape and placements) in the
order the run made them.

Use it in a single process or on every rank of torch.distributed:

    from magic_dump import Dump, partial, shard

    dump = Dump("ddp.dump", run="ddp-world2")               # rank and world from torch.distributed
    dump.record("input_ids", input_ids, kind="input", placements=[shard(0)])
    with dump.watch_activations(ddp_model, ["blocks.0", "blocks.1"]):  # each block's output
        logits = ddp_model(input_ids)
    loss = ...
    dump.record("loss", loss, kind="loss", placements=[partial("avg")])
    loss.backward()
    dump.record_gradients(ddp_model)                         # every parameter's .grad
    dump.close()                                             # rank files, then rank 0's manifest

Placements say, per mesh dimension, how the ranks' pieces make up the whole tensor, as in
PyTorch's DTensor: replicate(), shard(dim) (uneven sizes allowed; parts=3 for a fused q, k, v
weight whose each part is sharded; length=V for a vocabulary padded to a multiple of the ranks),
zigzag(dim) (a sequence split into 2n chunks, rank i holding chunks i and 2n-1-i) and
partial("sum" | "avg") (terms still to be reduced, such as a row-parallel layer's output before its
all-reduce); each takes on=[...], the coordinates along its mesh dimension that hold a piece at all
(a pipeline stage's layers: replicate(on=[1]); a rank off them does not record it). A record of one micro-batch of a step says which: micro_batch=k. Without
torch.distributed the mesh is [] and records take no placements; with it the
mesh defaults to one dimension [{"name": "dp", "size": world}] with coordinates [rank], or the
caller declares its own mesh (outermost dimension first) and this rank's coordinates.

Two layouts over one world (a colocated encoder and language model): `meshes` names each further
grid, {"encoder": [("dp", 4)]}, and a record placed on it says so, mesh="encoder", its placements
one per dimension of that grid. The main mesh stays the language model's; such a dump is version 3.

What is inferred and what must be said: for a DistributedDataParallel model on the default dp mesh,
gradients after backward are the reduced gradient, replicated, and module outputs are batch
shards, shard(0); in a single process gradients are the reduced gradient (there is nothing to
reduce). Anything else (a hand-written reduction, another mesh) needs kind and placements stated,
and a ValueError names the missing field instead of guessing.

Records are kept in memory (copied, so a later in-place update does not change them) until
close(); this is meant for the small configurations a check runs. NaN and infinity are written as
they are: refusing them is the reader's job. Standard library and torch only: Debian's
python3-torch has no safetensors package, so the files are written here.
"""

import ctypes
import json
import os
import sys

import torch

FORMAT, VERSION = "magic-dump", 2
NAMED_MESHES_VERSION = 3  # written only when named meshes are declared; otherwise version 2 exactly
HELD_ON_VERSION = 4  # written only when a placement names the coordinates that hold a piece (on)

KINDS = ("input", "activation", "logits", "loss", "gradient", "reduced_gradient", "update", "parameter",
         "cotangent", "score", "other")
PHASES = ("forward", "backward", "reduction", "optimizer", "replay", "query", "other")
ORDERS = ("forward", "first", "hvp", "metagradient")

# Phase and derivative order where a kind says them; other kinds must state both.
_DEFAULT_PHASE_ORDER = {
    "input": ("forward", "forward"),
    "activation": ("forward", "forward"),
    "logits": ("forward", "forward"),
    "loss": ("forward", "forward"),
    "gradient": ("backward", "first"),
    "reduced_gradient": ("reduction", "first"),
}

_SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}


# ---- placements: the JSON objects of docs/dump-format.md -------------------------------------

def replicate(*, on=None):
    """Every rank along this mesh dimension holds the whole tensor (and they must agree)."""
    return _held_on({"type": "replicate"}, on)


def shard(dim, *, parts=None, length=None, on=None):
    """The pieces are concatenated along tensor dimension `dim` in coordinate order; uneven sizes are
    fine. A negative dim counts from the end of the recorded tensor's dimensions.

    `parts`: the dimension is that many equal consecutive parts (a fused qkv weight [3d, d]: parts=3),
    each sharded across the ranks; every piece holds its shard of each part, in part order.
    `length`: the whole's true length along dim, when it was padded at its end before the split (a
    vocabulary padded to a multiple of tp); the concatenation is cut to its first `length` entries."""
    placement = {"type": "shard", "dim": _checked_int(dim, "shard dim")}
    if parts is not None and length is not None:
        raise ValueError("shard: parts and length together (a fused shard is not padded)")
    if parts is not None:
        if _checked_int(parts, "shard parts") < 1:
            raise ValueError(f"shard parts: {parts!r} is not a count >= 1")
        if parts > 1:
            placement["parts"] = parts
    if length is not None:
        if _checked_int(length, "shard length") < 1:
            raise ValueError(f"shard length: {length!r} is not a positive length")
        placement["length"] = length
    return _held_on(placement, on)


def zigzag(dim, length=None, *, on=None):
    """Sequence dimension `dim` split into 2n equal chunks; coordinate i holds chunks i and 2n-1-i,
    concatenated in that order (context parallelism's load balancing). `length`: the sequence's
    true length when it was padded at its end to a multiple of 2n before the split."""
    placement = {"type": "zigzag", "dim": _checked_int(dim, "zigzag dim")}
    if length is not None:
        if _checked_int(length, "zigzag length") < 1:
            raise ValueError(f"zigzag length: {length!r} is not a positive length")
        placement["length"] = length
    return _held_on(placement, on)


def partial(reduce="sum", *, on=None):
    """Each piece is a full-shaped term still to be reduced: summed ("sum") or averaged ("avg")."""
    if reduce not in ("sum", "avg"):
        raise ValueError(f"partial reduce: {reduce!r} is not 'sum' or 'avg'")
    return _held_on({"type": "partial", "reduce": reduce}, on)


def _held_on(placement, on):
    """`placement` held by the coordinates `on` alone along its mesh dimension (every placement takes
    on=[...]): a pipeline stage's layers on=[stage], a tied embedding on=[0, last]. The ranks off
    those coordinates must not record it; a dump with any such placement is version 4."""
    if on is None:
        return placement
    if (not isinstance(on, (list, tuple)) or not on
            or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in on)
            or any(b <= a for a, b in zip(on, on[1:]))):
        raise ValueError(f"on: {on!r} is not a non-empty ascending list of distinct coordinates")
    return {**placement, "on": list(on)}


def _checked_int(value, field):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: {value!r} is not an integer")
    return value


def _checked_placement(placement, tensor_dims, field):
    """A copy of `placement` with a negative dim resolved, or ValueError naming what is wrong."""
    if not isinstance(placement, dict) or "type" not in placement:
        raise ValueError(f"{field}: {placement!r} is not a placement (use replicate(), shard(dim), "
                         f"zigzag(dim) or partial('sum'|'avg'))")
    kind, on = placement["type"], placement.get("on")
    fields = set(placement) - {"on"}
    if kind == "replicate" and len(fields) == 1:
        return replicate(on=on)
    optional = {"shard": {"parts", "length"}, "zigzag": {"length"}}.get(kind, set())
    if kind in ("shard", "zigzag") and "dim" in placement and fields <= {"type", "dim"} | optional:
        dim = _checked_int(placement["dim"], f"{field} dim")
        resolved = dim + tensor_dims if dim < 0 else dim
        if not 0 <= resolved < tensor_dims:
            raise ValueError(f"{field}: {kind} dim {dim} is outside a tensor of {tensor_dims} dimensions")
        if kind == "zigzag":
            return zigzag(resolved, placement.get("length"), on=on)
        return shard(resolved, parts=placement.get("parts"), length=placement.get("length"), on=on)
    if kind == "partial" and fields == {"type", "reduce"}:
        return partial(placement["reduce"], on=on)
    raise ValueError(f"{field}: {placement!r} is not a placement of the dump format "
                     f"(replicate, shard with dim and parts or length, zigzag with dim and length, "
                     f"partial with reduce; each optionally with on)")


# ---- the dump ----------------------------------------------------------------------------------

class _Record:
    __slots__ = ("name", "kind", "phase", "order", "step", "micro_batch", "layer", "mesh", "placements",
                 "concat_dim", "tensor")

    def __init__(self, **fields):
        for k, v in fields.items():
            setattr(self, k, v)

    def identity(self):
        # What makes two records the same tensor (docs/dump-format.md); layer, key and mesh do not.
        return (self.name, self.kind, self.phase, self.order, self.step, self.micro_batch)


class Dump:
    """A dump being written to `folder`; call the same record calls on every rank, then close().

    `run` is a free label shown in reports. `mesh` (list of (name, size) pairs or of
    {"name", "size"} dicts, outermost first) and `coords` (this rank's coordinates) declare a mesh
    other than the default; `coords` defaults to the rank's row-major position in `mesh`.
    `meshes` ({name: dimensions as for `mesh`}) names further grids over the same ranks (an
    encoder's layout beside the language model's main mesh) and `mesh_coords` ({name: coordinates})
    this rank's place on each, by default its row-major position; records say which grid they are
    placed on with mesh=name. With named meshes the dump is version 3, without them version 2.
    `step` is the training step given to records that do not name one; set it as training goes.
    """

    def __init__(self, folder, run="", mesh=None, coords=None, step=0, meshes=None, mesh_coords=None):
        if not isinstance(run, str):
            raise ValueError(f"run: {run!r} is not a string")
        self.folder = os.fspath(folder)
        self.run = run
        self.step = step
        self._distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.rank = torch.distributed.get_rank() if self._distributed else 0
        self.world = torch.distributed.get_world_size() if self._distributed else 1
        self.mesh, self.coords = self._checked_mesh(mesh, coords)
        self._default_mesh = mesh is None
        self.meshes, self.mesh_coords = self._checked_meshes(meshes, mesh_coords)
        self._records = []
        self._by_identity = {}
        self._closed = False
        os.makedirs(self.folder, exist_ok=True)
        if self.rank == 0:
            # A manifest left by an earlier run would make the folder read as complete while the new
            # rank files are being written: remove it, close() writes the new one last.
            try:
                os.remove(os.path.join(self.folder, "manifest.json"))
            except FileNotFoundError:
                pass

    def _checked_mesh(self, mesh, coords):
        if mesh is None:
            if coords is not None:
                raise ValueError("coords: given without a mesh")
            return ([{"name": "dp", "size": self.world}], [self.rank]) if self._distributed else ([], [])
        dims = self._checked_grid(mesh, "mesh")
        return dims, self._checked_coords(coords, dims, "coords", "mesh")

    def _checked_meshes(self, meshes, mesh_coords):
        if meshes is None:
            meshes = {}
        if not isinstance(meshes, dict):
            raise ValueError(f"meshes: {meshes!r} is not a dict of grid name -> dimensions")
        if mesh_coords is None:
            mesh_coords = {}
        if not isinstance(mesh_coords, dict):
            raise ValueError(f"mesh_coords: {mesh_coords!r} is not a dict of grid name -> this rank's coordinates")
        unknown = [n for n in mesh_coords if n not in meshes]
        if unknown:
            raise ValueError(f"mesh_coords: {unknown[0]!r} is not a grid named in meshes "
                             f"({', '.join(map(repr, meshes)) or 'none'})")
        grids, coords = {}, {}
        for name, dims in meshes.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"meshes: grid name {name!r} is not a non-empty string ('' is the main mesh)")
            grids[name] = self._checked_grid(dims, f"meshes {name!r}")
            coords[name] = self._checked_coords(mesh_coords.get(name), grids[name], f"mesh_coords {name!r}",
                                                f"meshes {name!r}")
        return grids, coords

    def _checked_grid(self, mesh, field):
        """A grid's dimensions as {"name", "size"} dicts, or ValueError naming `field`."""
        if isinstance(mesh, (str, dict)) or not isinstance(mesh, (list, tuple)):
            raise ValueError(f"{field}: {mesh!r} is not a list of (name, size) dimensions")
        dims = []
        for entry in mesh:
            try:
                name, size = (entry["name"], entry["size"]) if isinstance(entry, dict) else entry
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{field}: dimension {entry!r} is not a (name, size) pair or a "
                                 f"{{'name', 'size'}} dict") from None
            if not isinstance(name, str) or not name or name in [d["name"] for d in dims]:
                raise ValueError(f"{field}: dimension name {name!r} is empty, not a string or repeated")
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{field}: size of {name!r} is {size!r}, not an integer >= 1")
            dims.append({"name": name, "size": size})
        product = 1
        for d in dims:
            product *= d["size"]
        if product != self.world:
            raise ValueError(f"{field}: sizes multiply to {product}, but there are {self.world} ranks")
        return dims

    def _checked_coords(self, coords, dims, field, grid_field):
        """This rank's coordinates on `dims`: `coords`, or by default its row-major position."""
        if coords is None:
            coords, rest = [], self.rank
            for d in reversed(dims):
                coords.insert(0, rest % d["size"])
                rest //= d["size"]
        if isinstance(coords, (str, dict)) or not isinstance(coords, (list, tuple)):
            raise ValueError(f"{field}: {coords!r} is not a list of coordinates")
        coords = list(coords)
        if len(coords) != len(dims) or any(isinstance(c, bool) or not isinstance(c, int) or not 0 <= c < d["size"]
                                           for c, d in zip(coords, dims)):
            raise ValueError(f"{field}: {coords!r} is not one coordinate per {grid_field} dimension within its size "
                             f"({[(d['name'], d['size']) for d in dims]})")
        return coords

    def _grid(self, mesh, field):
        """The dimensions of grid `mesh` ("" the main mesh), or ValueError naming `field`."""
        if mesh == "":
            return self.mesh
        if isinstance(mesh, str) and mesh in self.meshes:
            return self.meshes[mesh]
        raise ValueError(f"{field}: {mesh!r} is not '' (the main mesh) or a grid named in meshes "
                         f"({', '.join(map(repr, self.meshes)) or 'none declared'})")

    def _mesh_text(self, mesh=""):
        grid = ",".join(f"{d['name']}={d['size']}" for d in self._grid(mesh, "mesh"))
        if mesh:
            return f"{mesh!r} {grid or '[]'}"
        return grid or "[] (single process)"

    # ---- recording -----------------------------------------------------------------------------

    def record(self, name, tensor, *, kind, phase=None, order=None, step=None, layer="", placements=None,
               concat_dim=None, micro_batch=-1, mesh=""):
        """Record this rank's piece of tensor `name`.

        `kind`: one of KINDS; `phase` and `order` default from the kind where it says them (input,
        activation, logits, loss: forward; gradient: backward, first; reduced_gradient: reduction,
        first). `placements`: one per dimension of the record's grid; none on the single-process mesh [].
        `mesh`: the grid the record is placed on: "" (the default) the main mesh, or a name in the
        dump's `meshes` (an encoder's tensors on the encoder's grid).
        `concat_dim`: for micro-batches, record each one with the same name; the pieces of one step
        are concatenated along this dimension into one record (without it, a second record of the
        same name, kind, phase, order, step and micro-batch is an error).
        `micro_batch`: which micro-batch of the step the record belongs to (0, 1, ...), when the run
        accumulates gradients and records each micro-batch apart; -1 (the default): the whole step.
        """
        if self._closed:
            raise ValueError(f"record {name!r}: the dump of {self.folder} is already closed")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name: {name!r} is not a non-empty string")
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"tensor of {name!r}: a {type(tensor).__name__}, not a torch.Tensor")
        if tensor.dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(f"dtype of {name!r}: {tensor.dtype} has no safetensors code in the dump format "
                             f"({', '.join(_SAFETENSORS_DTYPES.values())})")
        if kind not in KINDS:
            raise ValueError(f"kind of {name!r}: {kind!r} is not one of {', '.join(KINDS)}")
        default_phase, default_order = _DEFAULT_PHASE_ORDER.get(kind, (None, None))
        phase = default_phase if phase is None else phase
        order = default_order if order is None else order
        if phase not in PHASES:
            raise ValueError(f"phase of {name!r}: {phase!r} is not one of {', '.join(PHASES)}"
                             + ("" if default_phase else f" (kind {kind!r} needs it stated)"))
        if order not in ORDERS:
            raise ValueError(f"order of {name!r}: {order!r} is not one of {', '.join(ORDERS)}"
                             + ("" if default_order else f" (kind {kind!r} needs it stated)"))
        step = self.step if step is None else step
        if isinstance(step, bool) or not isinstance(step, int) or step < -1:
            raise ValueError(f"step of {name!r}: {step!r} is not an integer >= -1")
        if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < -1:
            raise ValueError(f"micro_batch of {name!r}: {micro_batch!r} is not an integer >= -1")
        if not isinstance(layer, str):
            raise ValueError(f"layer of {name!r}: {layer!r} is not a string")
        self._grid(mesh, f"mesh of {name!r}")
        placements = self._checked_placements(name, tensor, placements, mesh)
        if concat_dim is not None:
            concat_dim = _checked_int(concat_dim, f"concat_dim of {name!r}")
            if not -tensor.dim() <= concat_dim < tensor.dim():
                raise ValueError(f"concat_dim of {name!r}: {concat_dim} is outside a tensor of "
                                 f"{tensor.dim()} dimensions")

        # A copy on the CPU: the caller's tensor may be updated in place later (an optimizer step,
        # DDP's next reduction into .grad).
        piece = tensor.detach().to("cpu", copy=True).contiguous()
        record = _Record(name=name, kind=kind, phase=phase, order=order, step=step, micro_batch=micro_batch,
                         layer=layer, mesh=mesh, placements=placements, concat_dim=concat_dim, tensor=piece)
        earlier = self._by_identity.get(record.identity())
        if earlier is None:
            self._records.append(record)
            self._by_identity[record.identity()] = record
            return
        if concat_dim is None or earlier.concat_dim != concat_dim:
            raise ValueError(f"name {name!r}: recorded twice ({kind}, {phase}, {order}, step {step}, micro-batch "
                             f"{micro_batch}) on rank {self.rank}; give each micro-batch's record the same "
                             f"concat_dim to join them, or its micro_batch to keep them apart, or set dump.step "
                             f"for a new step")
        if (earlier.mesh != mesh or earlier.placements != placements or earlier.layer != layer
                or earlier.tensor.dtype != piece.dtype):
            raise ValueError(f"name {name!r}: a micro-batch's mesh, placements, layer or dtype differ from the "
                             f"record it joins")
        earlier.tensor = torch.cat([earlier.tensor, piece], dim=concat_dim)

    def _checked_placements(self, name, tensor, placements, mesh=""):
        grid = self._grid(mesh, f"mesh of {name!r}")
        if placements is None:
            if grid:
                raise ValueError(f"placements of {name!r}: required on mesh {self._mesh_text(mesh)}, one per mesh "
                                 f"dimension (e.g. [shard(0)] for a batch shard, [replicate()])")
            return []
        if not isinstance(placements, (list, tuple)) or len(placements) != len(grid):
            raise ValueError(f"placements of {name!r}: {placements!r} is not a list of one placement per mesh "
                             f"dimension (mesh {self._mesh_text(mesh)})")
        checked = [_checked_placement(p, tensor.dim(), f"placements of {name!r}") for p in placements]
        for p in checked:
            if p["type"] == "zigzag" and tensor.shape[p["dim"]] % 2:
                raise ValueError(f"placements of {name!r}: a zigzag piece holds two equal chunks, but its "
                                 f"dim {p['dim']} has odd size {tensor.shape[p['dim']]}")
            if p.get("parts", 1) > 1 and tensor.shape[p["dim"]] % p["parts"]:
                raise ValueError(f"placements of {name!r}: a piece of a shard of {p['parts']} parts holds its "
                                 f"shard of each part, but its dim {p['dim']} has size {tensor.shape[p['dim']]}")
        coords = self.coords if mesh == "" else self.mesh_coords[mesh]
        for dim, coordinate, p in zip(grid, coords, checked):
            if "on" not in p:
                continue
            if p["on"][-1] >= dim["size"]:
                raise ValueError(f"placements of {name!r}: on {p['on']} along {dim['name']}, whose size is "
                                 f"{dim['size']}")
            if coordinate not in p["on"]:
                raise ValueError(f"placements of {name!r}: on {p['on']} along {dim['name']} leaves out this rank "
                                 f"({dim['name']} {coordinate}); a rank records only what it holds")
        return checked

    def watch_activations(self, model, names, *, placements=None, concat_dim=None, micro_batch=-1, mesh=""):
        """Forward hooks recording each named submodule's output as an `activation` (name and layer:
        the module's name) at the dump's current step (and `micro_batch`, on grid `mesh`); a tuple
        output records its first element.
        A DistributedDataParallel model is unwrapped and its outputs are batch shards, [shard(0)],
        on the default mesh. Returns a handle; `with` it, or call .remove(), to stop recording."""
        model, ddp = _unwrapped(model)
        if self._grid(mesh, "mesh of activations") and placements is None:
            if not (ddp and self._default_mesh and mesh == ""):
                raise ValueError(f"placements of activations: required for a model that is not "
                                 f"DistributedDataParallel on the default dp mesh (mesh {self._mesh_text(mesh)})")
            placements = [shard(0)]
        modules = dict(model.named_modules())
        if isinstance(names, str) or not names:
            raise ValueError(f"names: {names!r} is not a non-empty list of module names")
        missing = [n for n in names if n not in modules or n == ""]
        if missing:
            known = ", ".join(n for n in modules if n)
            raise ValueError(f"names: no submodule {missing[0]!r} in the model (it has {known})")

        def hook_for(module_name):
            def hook(_module, _inputs, output):
                value = output[0] if isinstance(output, (tuple, list)) else output
                self.record(module_name, value, kind="activation", layer=module_name, placements=placements,
                            concat_dim=concat_dim, micro_batch=micro_batch, mesh=mesh)
            return hook

        return _Hooks([modules[n].register_forward_hook(hook_for(n)) for n in names])

    def record_gradients(self, model, *, kind=None, phase=None, placements=None, step=None, micro_batch=-1,
                         mesh=""):
        """Record every trainable parameter's .grad, named as the unwrapped model names it (no
        `module.` prefix), layer the module that owns it. `kind` defaults to `reduced_gradient` for a
        DistributedDataParallel model after backward (placements [replicate()] on the default mesh)
        and for a single process; a plain model on several ranks must say kind ('gradient' before a
        hand-written reduction, 'reduced_gradient' after it) and placements: a list, or a function
        of the parameter's name returning one. `micro_batch`, `mesh`: as for record()."""
        model, ddp = _unwrapped(model)
        grid = self._grid(mesh, "mesh of gradients")
        if kind is None:
            if not (ddp or not self._distributed):
                raise ValueError("kind of gradients: required for a model that is not DistributedDataParallel "
                                 "on several ranks ('gradient' before your reduction, 'reduced_gradient' after)")
            kind = "reduced_gradient"
        if placements is None and grid:
            if not (ddp and self._default_mesh and mesh == "" and kind == "reduced_gradient"):
                raise ValueError(f"placements of gradients: required unless the model is DistributedDataParallel "
                                 f"on the default dp mesh and kind is 'reduced_gradient' "
                                 f"(mesh {self._mesh_text(mesh)})")
            placements = [replicate()]
        # In the order backward makes them, the last layer's first (docs/dump-format.md, "records").
        for name, parameter in reversed(list(model.named_parameters())):
            if not parameter.requires_grad:
                continue
            if parameter.grad is None:
                raise ValueError(f"gradient of {name!r}: .grad is None (call after backward; a parameter the "
                                 f"loss does not use has no gradient)")
            self.record(name, parameter.grad, kind=kind, phase=phase, order="first", step=step,
                        micro_batch=micro_batch, layer=name.rpartition(".")[0], mesh=mesh,
                        placements=placements(name) if callable(placements) else placements)

    # ---- writing -------------------------------------------------------------------------------

    def close(self):
        """Write this rank's safetensors file, then (rank 0) manifest.json, each atomically. On
        several ranks this is a collective: every rank calls it, and every rank returns once the
        manifest exists, or every rank raises the same error."""
        if self._closed:
            raise ValueError(f"close: the dump of {self.folder} is already closed")
        self._closed = True
        file_name = f"rank{self.rank}.safetensors"
        mine = {"rank": self.rank, "coords": self.coords, "mesh_coords": self.mesh_coords, "file": file_name,
                "grids": {"mesh": self.mesh, "meshes": self.meshes},
                "records": [_summary(r) for r in self._records]}
        everyone = self._gathered(mine)
        # Every rank builds (and checks) the manifest from the same gathered lists, so every rank
        # raises the same error, or none does; the manifest's keys name this rank's tensors.
        manifest = _manifest(self.run, self.mesh, self.meshes, everyone)
        key_of = {_identity(r): r["key"] for r in manifest["records"]}
        error = None
        try:
            _write_atomically(os.path.join(self.folder, file_name),
                              safetensors_bytes({key_of[r.identity()]: r.tensor for r in self._records}))
        except OSError as e:  # reported to every rank below, so that none waits for the manifest
            error = f"rank {self.rank} could not write {file_name}: {e}"
        failed = [e for e in self._gathered(error) if e]
        if failed:
            raise RuntimeError("; ".join(failed))
        if self.rank == 0:
            _write_atomically(os.path.join(self.folder, "manifest.json"),
                              (json.dumps(manifest, indent=1) + "\n").encode())
        if self._distributed:
            torch.distributed.barrier()  # nobody returns before the dump is complete

    def _gathered(self, mine):
        """Every rank's `mine`, by rank."""
        if not self._distributed:
            return [mine]
        everyone = [None] * self.world
        torch.distributed.all_gather_object(everyone, mine)
        return everyone

    def __enter__(self):
        return self

    def __exit__(self, exc_type, _exc, _tb):
        if exc_type is None:  # a run that failed leaves no manifest: its dump reads as unfinished
            self.close()


class _Hooks:
    def __init__(self, handles):
        self._handles = handles

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.remove()


def _unwrapped(model):
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    return (model.module if ddp else model), ddp


# ---- manifest --------------------------------------------------------------------------------

def _summary(record):
    return {"name": record.name, "kind": record.kind, "phase": record.phase, "order": record.order,
            "step": record.step, "micro_batch": record.micro_batch, "layer": record.layer,
            "dtype": _SAFETENSORS_DTYPES[record.tensor.dtype], "mesh": record.mesh,
            "placements": record.placements, "piece_shape": list(record.tensor.shape)}


def _identity(summary):
    return tuple(summary[f] for f in ("name", "kind", "phase", "order", "step", "micro_batch"))


def _held_somewhere(summary):
    return any("on" in p for p in summary["placements"])


def _holds(summary, coords):
    return all("on" not in p or c in p["on"] for p, c in zip(summary["placements"], coords))


def _merged_order(ranks):
    """Every rank's records as one list that keeps each rank's own order: a rank's record comes
    after the one it made before it. Among records free to go next, the one the lowest rank made
    earliest goes first (so a run whose ranks make the same records keeps that order)."""
    position, after, waiting = {}, {}, {}
    for r in ranks:
        previous = None
        for s in r["records"]:
            i = _identity(s)
            position.setdefault(i, (r["rank"], len(position), s))
            waiting.setdefault(i, 0)
            if previous is not None and i not in after.setdefault(previous, set()):
                after[previous].add(i)
                waiting[i] += 1
            previous = i
    ready = sorted((position[i][:2], i) for i, n in waiting.items() if n == 0)
    order = []
    while ready:
        _, i = ready.pop(0)
        order.append(position[i][2])
        for j in after.get(i, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append((position[j][:2], j))
                ready.sort()
    if len(order) != len(position):
        raise ValueError("records: the ranks made their common records in orders that contradict each other")
    return order


def _manifest(run, mesh, meshes, ranks):
    """The manifest: version 2 exactly as before named meshes when `meshes` is empty and no placement
    says which coordinates hold a piece (`on`); version 3 with `meshes`, each rank's `mesh_coords`
    and each record's `mesh`; version 4 as 3, with `on`."""
    ranks = sorted(ranks, key=lambda r: r["rank"])
    for r in ranks[1:]:
        if r["grids"] != ranks[0]["grids"]:
            raise ValueError(f"mesh, meshes: rank {r['rank']} declares {r['grids']}, rank 0 {ranks[0]['grids']}; "
                             f"every rank must declare the same grids")
    grids = {"": mesh, **meshes}
    on_grid = {"": {r["rank"]: r["coords"] for r in ranks},
               **{g: {r["rank"]: r["mesh_coords"][g] for r in ranks} for g in meshes}}
    for g, coords_of in on_grid.items():
        seen = {}
        for rank, coords in coords_of.items():
            if tuple(coords) in seen:
                field = "coords" if g == "" else f"mesh_coords {g!r}"
                raise ValueError(f"{field}: ranks {seen[tuple(coords)]} and {rank} both have {coords}")
            seen[tuple(coords)] = rank
    # Records every rank holds: the same records in the same order on every rank.
    first = [s for s in ranks[0]["records"] if not _held_somewhere(s)]
    same = ("name", "kind", "phase", "order", "step", "micro_batch", "layer", "dtype", "mesh", "placements")
    for r in ranks[1:]:
        everywhere = [s for s in r["records"] if not _held_somewhere(s)]
        if len(everywhere) != len(first):
            raise ValueError(f"records: rank {r['rank']} made {len(everywhere)} records, rank 0 made "
                             f"{len(first)}; every rank must make the same records in the same order")
        for i, (a, b) in enumerate(zip(first, everywhere)):
            differ = [f for f in same if a[f] != b[f]]
            if differ:
                raise ValueError(f"records: record {i} ({a['name']!r} on rank 0, {b['name']!r} on rank {r['rank']}) "
                                 f"differs in {', '.join(differ)}")
    # Records some ranks hold (on): made by exactly those ranks, alike.
    made_by = {}
    for r in ranks:
        for s in r["records"]:
            if _held_somewhere(s):
                made_by.setdefault(_identity(s), []).append((r["rank"], s))
    for identity, makers in made_by.items():
        s = makers[0][1]
        for rank, other in makers[1:]:
            differ = [f for f in same if s[f] != other[f]]
            if differ:
                raise ValueError(f"records: {s['name']!r} on ranks {makers[0][0]} and {rank} differs in "
                                 f"{', '.join(differ)}")
        holders = [r["rank"] for r in ranks if _holds(s, on_grid[s["mesh"]][r["rank"]])]
        if [rank for rank, _ in makers] != holders:
            raise ValueError(f"records: {s['name']!r} ({s['kind']}, step {s['step']}, micro-batch "
                             f"{s['micro_batch']}) was made by ranks {[rank for rank, _ in makers]}, but its "
                             f"placements give pieces to ranks {holders}")
    pieces_of = {}
    for r in ranks:
        for s in r["records"]:
            pieces_of.setdefault(_identity(s), {})[tuple(on_grid[s["mesh"]][r["rank"]])] = s["piece_shape"]
    records = []
    held_on = bool(made_by)
    for i, s in enumerate(_merged_order(ranks)):
        record = {"key": f"r{i:06d}", "name": s["name"], "kind": s["kind"], "phase": s["phase"], "order": s["order"],
                  "step": s["step"], "micro_batch": s["micro_batch"], "layer": s["layer"], "dtype": s["dtype"],
                  "shape": _reassembled_shape(s, grids[s["mesh"]], pieces_of[_identity(s)])}
        if meshes or held_on:
            record["mesh"] = s["mesh"]
        record["placements"] = s["placements"]
        records.append(record)
    if not meshes and not held_on:
        return {"format": FORMAT, "version": VERSION, "run": run, "mesh": mesh,
                "ranks": [{"rank": r["rank"], "coords": r["coords"], "file": r["file"]} for r in ranks],
                "records": records}
    return {"format": FORMAT, "version": HELD_ON_VERSION if held_on else NAMED_MESHES_VERSION, "run": run,
            "mesh": mesh, "meshes": meshes,
            "ranks": [{"rank": r["rank"], "coords": r["coords"], "mesh_coords": r["mesh_coords"], "file": r["file"]}
                      for r in ranks],
            "records": records}


def _reassembled_shape(summary, mesh, pieces):
    """The full shape the pieces make on the record's grid `mesh` ({coords on it: piece shape}),
    combining its dimensions innermost first as a reader does; ValueError naming the record when
    they do not tile it."""
    name = summary["name"]
    for d in reversed(range(len(mesh))):
        placement = summary["placements"][d]
        groups = {}
        for coords, shape in pieces.items():
            groups.setdefault(coords[:d] + coords[d + 1:], []).append((coords[d], shape))
        combined = {}
        for rest, members in groups.items():
            shapes = [s for _, s in sorted(members)]
            combined[rest] = _combined_shape(name, mesh[d]["name"], placement, shapes)
        pieces = combined
    (shape,) = pieces.values()
    return shape


def _combined_shape(name, dim_name, placement, shapes):
    if placement["type"] in ("replicate", "partial", "zigzag"):
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"placements of {name!r}: {placement['type']} pieces along {dim_name} have different "
                             f"shapes {shapes}")
        if placement["type"] != "zigzag":
            return shapes[0]
    k = placement["dim"]
    if any(len(s) != len(shapes[0]) or s[:k] + s[k + 1:] != shapes[0][:k] + shapes[0][k + 1:] for s in shapes):
        raise ValueError(f"placements of {name!r}: pieces along {dim_name} differ outside dim {k}: {shapes}")
    parts = placement.get("parts", 1)
    if any(s[k] % parts for s in shapes):
        raise ValueError(f"placements of {name!r}: a shard of {parts} parts along {dim_name} needs pieces whose dim "
                         f"{k} splits into {parts} equal parts: {shapes}")
    total = sum(s[k] for s in shapes)
    if placement.get("length") is not None:
        if placement["length"] > total:
            raise ValueError(f"placements of {name!r}: {placement['type']} length {placement['length']} along "
                             f"{dim_name} is more than the {total} entries its pieces make")
        total = placement["length"]
    return shapes[0][:k] + [total] + shapes[0][k + 1:]


# ---- safetensors -------------------------------------------------------------------------------

def safetensors_bytes(tensors):
    """A safetensors file holding `tensors` (key -> tensor) in that order: 8-byte little-endian
    header length, the JSON header padded with spaces to a multiple of 8, the raw data."""
    if sys.byteorder != "little":  # the format is little-endian; raw memory is written as is
        raise RuntimeError("safetensors: writing on a big-endian machine is not supported")
    header, blobs, offset = {}, [], 0
    for key, tensor in tensors.items():
        data = _raw_bytes(tensor)
        header[key] = {"dtype": _SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                       "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def _raw_bytes(tensor):
    t = tensor.detach().cpu().contiguous()
    size = t.numel() * t.element_size()
    # The tensor's own memory, dtype-agnostic (bfloat16 included, which numpy lacks).
    return ctypes.string_at(t.data_ptr(), size) if size else b""


def _write_atomically(path, data):
    temporary = f"{path}.tmp-{os.getpid()}"
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
