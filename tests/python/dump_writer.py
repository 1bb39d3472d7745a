#!/usr/bin/env python3
"""ctest python.dump_writer: python/magic_dump.py writes what docs/dump-format.md says, checked by
the tests' own reader (dump_reader.py), and refuses what it must with a ValueError naming the field.

  safetensors      every dtype of the format (0-d, empty and non-contiguous tensors among them)
                   parses back byte for byte: header length, JSON header padded with spaces to 8,
                   offsets without holes, the raw little-endian data
  manifest         a single process: every field of every record, in the order made, keys r000000...,
                   mesh [], NaN written as it is, no temporary file left, a stale manifest removed
  micro-batches    records with concat_dim join into one; records with micro_batch stay apart
  refusals         unknown kind, phase, order, placement; bad step, dims, dtype; duplicate records;
                   records after close; a mesh that is not the world
  named meshes     version 3 only when named meshes are declared: meshes={} writes the same bytes
                   as none (version 2); refusals of an unknown record mesh, placements that are not
                   one per dimension of the record's grid, a named grid that is not the world, bad
                   mesh_coords
  ranks (world 2)  a declared mesh dp=1 x cp=2 with zigzag, uneven, fused (3 parts) and padded
                   shards reassembles exactly (version 2, no field of version 3);
                   two grids (version 3): records on the main mesh and on a named grid "encoder"
                   whose coordinates run opposite to the ranks reassemble exactly by each rank's
                   coordinates on the record's grid;
                   held pieces (version 4): a record on=[0] and one on=[1] beside a partial sum on
                   both reassemble from their holders alone, each rank's file holding only its own;
                   ranks that record differently, share coordinates on a named grid, or leave out
                   a holder of a record placed on=[...], all raise, and no manifest is written
  magic-compare    (when given) reads what the writer writes: every dtype (exit 0), the declared
                   mesh's and the two grids' dumps against the same tensors written whole by one
                   process (exit 0), and refuses a dump holding NaN, naming the record (exit 2)
"""

import json
import math
import os
import subprocess
import sys

import torch

import paths  # noqa: F401  (python/ on sys.path)
import magic_dump
from compare_dumps import arguments, private_temporary_folder, run_magic_compare
from dump_reader import read_dump, read_safetensors
from magic_dump import Dump, partial, replicate, shard, zigzag
from ranks import run_on_ranks


def every_dtype():
    generator = torch.Generator().manual_seed(3)
    floats = torch.randn(3, 5, generator=generator, dtype=torch.float64)
    return {
        "f64": floats,
        "f32": floats.float().t(),  # not contiguous
        "bf16": floats.bfloat16(),
        "f16": floats.half()[:, 1:4],  # not contiguous
        "i64": torch.arange(-3, 4),
        "i32": torch.tensor([[-7, 2**31 - 1]], dtype=torch.int32),
        "i16": torch.tensor([-32768, 5], dtype=torch.int16),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
    }


def check_safetensors(tmp):
    tensors = every_dtype()
    path = os.path.join(tmp, "all.safetensors")
    with open(path, "wb") as f:
        f.write(magic_dump.safetensors_bytes(tensors))
    with open(path, "rb") as f:
        raw = f.read()
    header_len = int.from_bytes(raw[:8], "little")
    assert header_len % 8 == 0 and raw[8:9] == b"{", raw[:16]
    back = read_safetensors(path)  # checks offsets, sizes and padding
    assert list(back) == list(tensors), list(back)
    for key, tensor in tensors.items():
        assert back[key].dtype == tensor.dtype and back[key].shape == tensor.shape, key
        assert torch.equal(back[key], tensor), key
    # The bytes are the values' little-endian encoding, independent of torch: check one by struct.
    entry = json.loads(raw[8:8 + header_len])["i32"]
    begin = 8 + header_len + entry["data_offsets"][0]
    assert raw[begin:begin + 8] == (-7).to_bytes(4, "little", signed=True) + (2**31 - 1).to_bytes(4, "little")
    os.remove(path)


def check_single_process_manifest(tmp):
    folder = os.path.join(tmp, "single.dump")
    os.makedirs(folder)
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        f.write("{}")  # an earlier run's manifest
    dump = Dump(folder, run="unit")
    assert not os.path.exists(os.path.join(folder, "manifest.json")), "a stale manifest survived opening"
    values = torch.tensor([1.0, math.nan, 3.0], dtype=torch.float64)
    dump.record("ids", torch.arange(6).view(2, 3), kind="input")
    dump.record("hidden", torch.ones(2, 3, dtype=torch.float32), kind="activation", layer="blocks.0")
    dump.record("w", values, kind="update", phase="optimizer", order="first", step=4)
    dump.record("scores", torch.zeros(5, dtype=torch.float64), kind="score", phase="replay", order="metagradient",
                step=-1)
    dump.close()
    assert sorted(os.listdir(folder)) == ["manifest.json", "rank0.safetensors"], os.listdir(folder)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    assert list(manifest) == ["format", "version", "run", "mesh", "ranks", "records"], list(manifest)
    assert (manifest["format"], manifest["version"], manifest["run"], manifest["mesh"]) == ("magic-dump", 2, "unit", [])
    assert manifest["ranks"] == [{"rank": 0, "coords": [], "file": "rank0.safetensors"}], manifest["ranks"]
    expected = [
        ("r000000", "ids", "input", "forward", "forward", 0, -1, "", "I64", [2, 3]),
        ("r000001", "hidden", "activation", "forward", "forward", 0, -1, "blocks.0", "F32", [2, 3]),
        ("r000002", "w", "update", "optimizer", "first", 4, -1, "", "F64", [3]),
        ("r000003", "scores", "score", "replay", "metagradient", -1, -1, "", "F64", [5]),
    ]
    fields = ["key", "name", "kind", "phase", "order", "step", "micro_batch", "layer", "dtype", "shape", "placements"]
    for record, want in zip(manifest["records"], expected, strict=True):
        assert list(record) == fields, list(record)
        assert tuple(record[f] for f in fields[:-1]) == want and record["placements"] == [], record
    _, full = read_dump(folder)
    written = full[("w", "update", "optimizer", "first", 4, -1)]
    assert torch.equal(written.isnan(), values.isnan()) and written[0] == 1.0, written  # NaN kept as is


def check_micro_batches(tmp):
    folder = os.path.join(tmp, "micro.dump")
    dump = Dump(folder)
    first, second = torch.ones(2, 3), torch.full((1, 3), 2.0)
    dump.record("logits", first, kind="logits", concat_dim=0)
    dump.record("logits", second, kind="logits", concat_dim=0)
    dump.record("loss", first.sum(), kind="loss", micro_batch=0)
    dump.record("loss", second.sum(), kind="loss", micro_batch=1)
    dump.close()
    _, full = read_dump(folder)
    assert torch.equal(full[("logits", "logits", "forward", "forward", 0, -1)], torch.cat([first, second])), full
    assert full[("loss", "loss", "forward", "forward", 0, 0)] == 6.0, full
    assert full[("loss", "loss", "forward", "forward", 0, 1)] == 6.0, full


def refusals(tmp):
    """(what, a call that must raise ValueError, a word the message must contain)."""
    t = torch.zeros(4, 3)

    def fresh():
        return Dump(os.path.join(tmp, "refused.dump"))

    def twice():
        d = fresh()
        d.record("x", t, kind="activation")
        d.record("x", t, kind="activation")

    def after_close():
        d = fresh()
        d.close()
        d.record("x", t, kind="activation")

    return [
        ("unknown kind", lambda: fresh().record("x", t, kind="weights"), "kind"),
        ("unknown phase", lambda: fresh().record("x", t, kind="other", phase="warmup", order="first"), "phase"),
        ("kind without a default phase", lambda: fresh().record("x", t, kind="update"), "phase"),
        ("unknown order", lambda: fresh().record("x", t, kind="activation", order="second"), "order"),
        ("step below -1", lambda: fresh().record("x", t, kind="activation", step=-2), "step"),
        ("step not an integer", lambda: fresh().record("x", t, kind="activation", step=1.0), "step"),
        ("micro_batch below -1", lambda: fresh().record("x", t, kind="activation", micro_batch=-2), "micro_batch"),
        ("micro_batch not an integer", lambda: fresh().record("x", t, kind="activation", micro_batch="0"),
         "micro_batch"),
        ("shard parts below 1", lambda: shard(0, parts=0), "shard parts"),
        ("shard length below 1", lambda: shard(0, length=0), "shard length"),
        ("shard parts and length", lambda: shard(0, parts=3, length=5), "parts and length"),
        ("empty name", lambda: fresh().record("", t, kind="activation"), "name"),
        ("not a tensor", lambda: fresh().record("x", [1.0], kind="activation"), "tensor"),
        ("dtype without a code", lambda: fresh().record("x", t.to(torch.complex128), kind="activation"), "dtype"),
        ("placements on a single process", lambda: fresh().record("x", t, kind="activation",
                                                                  placements=[shard(0)]), "placements"),
        ("partial max", lambda: partial("max"), "partial"),
        ("shard dim not an integer", lambda: shard("0"), "shard dim"),
        ("same record twice", twice, "recorded twice"),
        ("record after close", after_close, "closed"),
        ("mesh larger than the world", lambda: Dump(os.path.join(tmp, "m.dump"), mesh=[("dp", 2)]), "mesh"),
        ("mesh names repeated", lambda: Dump(os.path.join(tmp, "m.dump"), mesh=[("dp", 1), ("dp", 1)]), "mesh"),
        ("coords outside the mesh", lambda: Dump(os.path.join(tmp, "m.dump"), mesh=[("dp", 1)], coords=[1]), "coords"),
        ("watching a module that is not there",
         lambda: fresh().watch_activations(torch.nn.Sequential(torch.nn.Linear(2, 2)), ["1"]), "names"),
    ]


def named_mesh_refusals(tmp):
    """(what, a call that must raise ValueError, a word the message must contain): named meshes on
    one process, where a grid of the world has sizes multiplying to 1."""
    t = torch.zeros(4, 3)
    folder = os.path.join(tmp, "named.dump")

    def two_grids():
        return Dump(folder, meshes={"encoder": [("dp", 1)]})

    def joined_on_another_grid():
        d = two_grids()
        d.record("x", t, kind="activation", concat_dim=0)
        d.record("x", t, kind="activation", concat_dim=0, mesh="encoder", placements=[replicate()])

    return [
        ("record on an unknown mesh", lambda: two_grids().record("x", t, kind="activation", mesh="vision"),
         "mesh of 'x'"),
        ("record on a mesh none declared", lambda: Dump(folder).record("x", t, kind="activation", mesh="encoder"),
         "mesh of 'x'"),
        ("placements missing on a named grid", lambda: two_grids().record("x", t, kind="activation", mesh="encoder"),
         "placements of 'x'"),
        ("placements of the main mesh on a named grid",
         lambda: two_grids().record("x", t, kind="activation", mesh="encoder", placements=[]), "placements of 'x'"),
        ("two placements on a grid of one dimension",
         lambda: two_grids().record("x", t, kind="activation", mesh="encoder", placements=[shard(0), shard(0)]),
         "placements of 'x'"),
        ("a placement on the main mesh [] of a two-grid dump",
         lambda: two_grids().record("x", t, kind="activation", placements=[shard(0)]), "placements of 'x'"),
        ("gradients on an unknown mesh", lambda: two_grids().record_gradients(torch.nn.Linear(2, 2), mesh="vision"),
         "mesh of gradients"),
        ("activations on an unknown mesh",
         lambda: two_grids().watch_activations(torch.nn.Sequential(torch.nn.Linear(2, 2)), ["0"], mesh="vision"),
         "mesh of activations"),
        ("micro-batches joined across grids", joined_on_another_grid, "mesh, placements"),
        ("a named grid larger than the world", lambda: Dump(folder, meshes={"encoder": [("dp", 2)]}),
         "meshes 'encoder'"),
        ("a named grid of size 0", lambda: Dump(folder, meshes={"encoder": [("dp", 0)]}), "meshes 'encoder'"),
        ("a named grid's names repeated", lambda: Dump(folder, meshes={"encoder": [("dp", 1), ("dp", 1)]}),
         "meshes 'encoder'"),
        ("a named grid that is not a list", lambda: Dump(folder, meshes={"encoder": ("dp", 1)}), "meshes 'encoder'"),
        ("an empty grid name", lambda: Dump(folder, meshes={"": [("dp", 1)]}), "meshes"),
        ("meshes not a dict", lambda: Dump(folder, meshes=[("dp", 1)]), "meshes"),
        ("mesh_coords of a grid not declared", lambda: Dump(folder, mesh_coords={"encoder": [0]}), "mesh_coords"),
        ("mesh_coords outside the grid",
         lambda: Dump(folder, meshes={"encoder": [("dp", 1)]}, mesh_coords={"encoder": [1]}), "mesh_coords 'encoder'"),
        ("mesh_coords of another length",
         lambda: Dump(folder, meshes={"encoder": [("dp", 1)]}, mesh_coords={"encoder": [0, 0]}),
         "mesh_coords 'encoder'"),
    ]


def check_version_2_unless_meshes_are_named(tmp):
    """meshes={} (and mesh="" on every record) writes the very bytes a dump without meshes writes,
    version 2; a named grid makes the same records version 3, the main grid's records mesh ""."""
    written = {}
    for label, options in (("none", {}), ("empty", {"meshes": {}, "mesh_coords": {}}),
                           ("named", {"meshes": {"encoder": [{"name": "dp", "size": 1}]}})):
        folder = os.path.join(tmp, f"version-{label}.dump")
        dump = Dump(folder, run="v", **options)
        dump.record("ids", torch.arange(6).view(2, 3), kind="input", mesh="")
        dump.record("hidden", torch.ones(2, 3, dtype=torch.float32), kind="activation")
        dump.close()
        with open(os.path.join(folder, "manifest.json"), "rb") as f:
            written[label] = f.read()
    assert written["empty"] == written["none"], "meshes={} changed the version 2 manifest"
    v2, v3 = json.loads(written["none"]), json.loads(written["named"])
    assert v2["version"] == 2 and "meshes" not in v2 and "mesh" not in v2["records"][0], v2
    assert list(v3) == ["format", "version", "run", "mesh", "meshes", "ranks", "records"], list(v3)
    assert v3["version"] == 3 and v3["meshes"] == {"encoder": [{"name": "dp", "size": 1}]}, v3
    assert v3["ranks"] == [{"rank": 0, "coords": [], "mesh_coords": {"encoder": [0]}, "file": "rank0.safetensors"}]
    assert [list(r)[-2:] for r in v3["records"]] == [["mesh", "placements"]] * 2, v3["records"]
    assert [r["mesh"] for r in v3["records"]] == ["", ""], v3["records"]
    assert [{k: v for k, v in r.items() if k != "mesh"} for r in v3["records"]] == v2["records"]
    read_dump(os.path.join(tmp, "version-named.dump"))


def expect_refusal(what, call, field):
    """`call()` raises a ValueError whose message names `field`."""
    try:
        call()
    except ValueError as e:
        assert field in str(e), f"{what}: the message does not name {field!r}: {e}"
        return
    raise AssertionError(f"{what}: no ValueError naming {field!r}")


def check_refusals(tmp):
    for what, call, field in refusals(tmp) + named_mesh_refusals(tmp):
        expect_refusal(what, call, field)


def check_placement_refusals_on_a_mesh(rank, world, folder):
    """On a 1-D mesh: placements are required, checked against the tensor, and a dim resolves."""
    dump = Dump(folder)
    for call, field in [(lambda: dump.record("x", torch.zeros(4), kind="activation"), "placements"),
                        (lambda: dump.record("x", torch.zeros(4), kind="activation", placements=[shard(1)]), "dim"),
                        (lambda: dump.record("x", torch.zeros(3), kind="activation", placements=[zigzag(0)]), "odd"),
                        (lambda: dump.record("x", torch.zeros(4), kind="activation",
                                             placements=[shard(0, parts=3)]), "3 parts"),
                        (lambda: dump.record("x", torch.zeros(4), kind="activation",
                                             placements=[{"type": "shard", "dim": 0, "parts": 2, "length": 3}]),
                         "parts and length"),
                        (lambda: dump.record("x", torch.zeros(4), kind="activation",
                                             placements=[{"type": "shard"}]), "placement"),
                        (lambda: dump.record_gradients(torch.nn.Linear(2, 2)), "kind"),
                        (lambda: dump.record("x", torch.zeros(4), kind="activation",
                                             placements=[replicate(on=[2])]), "whose size is 2"),
                        (lambda: dump.record("x", torch.zeros(4), kind="activation",
                                             placements=[replicate(on=[1 - rank])]), "leaves out this rank"),
                        (lambda: replicate(on=[1, 0]), "ascending"),
                        (lambda: partial("sum", on=[]), "on")]:
        expect_refusal(f"rank {rank}", call, field)
    dump.record("x", torch.zeros(rank + 1, 2), kind="activation", placements=[shard(-2)])  # uneven, dim -2 = 0
    dump.close()


def write_declared_mesh(rank, world, folder, whole):
    """Mesh dp=1 x cp=2 (coords row-major: rank r is cp r): a zigzag sequence, an uneven shard, a
    replica, a partial average, a fused shard (3 parts of 2 rows, cp r holding row r of each) and a
    padded shard (3 rows padded to 4, 2 per rank), each reassembling to the same `whole` tensors."""
    dump = Dump(folder, run="declared-mesh", mesh=[("dp", 1), ("cp", 2)])
    assert dump.coords == [0, rank], dump.coords
    sequence = whole["sequence"]  # [2, 8]: chunks of 2 positions; cp r holds chunks r and 3 - r
    chunks = sequence.chunk(4, dim=1)
    rows = [0, 1, 5][rank:rank + 2]  # uneven: 1 row, then 4
    padded = torch.cat([whole["padded"], torch.full((1, 2), 7.0, dtype=torch.float64)])  # 3 rows padded to 4
    pieces = {"sequence": (torch.cat([chunks[rank], chunks[3 - rank]], dim=1), [replicate(), zigzag(1)]),
              "rows": (whole["rows"][rows[0]:rows[1]], [replicate(), shard(0)]),
              "same": (whole["same"], [replicate(), replicate()]),
              "average": (whole["average"] * (2 * rank), [replicate(), partial("avg")]),
              "fused": (whole["fused"][[rank, 2 + rank, 4 + rank]], [replicate(), shard(0, parts=3)]),
              "padded": (padded[2 * rank:2 * rank + 2], [replicate(), shard(0, length=3)])}
    record_declared(dump, {name: piece for name, (piece, _) in pieces.items()},
                    {name: placements for name, (_, placements) in pieces.items()})
    dump.close()


def record_declared(dump, tensors, placements):
    """The declared-mesh records, in one place so that the whole and the pieces match by identity."""
    dump.record("sequence", tensors["sequence"], kind="activation", placements=placements["sequence"])
    dump.record("rows", tensors["rows"], kind="activation", placements=placements["rows"])
    dump.record("same", tensors["same"], kind="parameter", phase="optimizer", order="forward",
                placements=placements["same"])
    dump.record("average", tensors["average"], kind="loss", placements=placements["average"])
    dump.record("fused", tensors["fused"], kind="parameter", phase="optimizer", order="forward",
                placements=placements["fused"])
    dump.record("padded", tensors["padded"], kind="logits", placements=placements["padded"])


def write_two_grids(rank, world, folder, whole):
    """Main mesh dp=1 x cp=2 (rank r is cp r) and a named grid "encoder" dp=2 whose coordinates run
    opposite to the ranks (rank r is encoder dp 1 - r): the encoder's records are reassembled by
    those coordinates, so rank 1's piece comes first."""
    encoder_dp = 1 - rank
    dump = Dump(folder, run="two-grids", mesh=[("dp", 1), ("cp", 2)], meshes={"encoder": [("dp", 2)]},
                mesh_coords={"encoder": [encoder_dp]})
    assert (dump.coords, dump.mesh_coords) == ([0, rank], {"encoder": [encoder_dp]}), dump.mesh_coords
    rows = [0, 2, 5][encoder_dp:encoder_dp + 2]  # uneven on the encoder's grid: 2 rows, then 3
    dump.record("patches", whole["patches"][rows[0]:rows[1]], kind="input", mesh="encoder", placements=[shard(0)])
    chunks = whole["sequence"].chunk(4, dim=1)
    dump.record("sequence", torch.cat([chunks[rank], chunks[3 - rank]], dim=1), kind="activation",
                placements=[replicate(), zigzag(1)])
    dump.record("encoder.w", whole["encoder.w"], kind="reduced_gradient", mesh="encoder", placements=[replicate()])
    dump.record("loss", whole["loss"] * (0.25 + 0.5 * encoder_dp), kind="loss", mesh="encoder",
                placements=[partial("sum")])
    dump.close()


def record_two_grids_whole(folder, whole):
    """The same records as write_two_grids, written whole by one process (version 2)."""
    dump = Dump(folder)
    dump.record("patches", whole["patches"], kind="input")
    dump.record("sequence", whole["sequence"], kind="activation")
    dump.record("encoder.w", whole["encoder.w"], kind="reduced_gradient")
    dump.record("loss", whole["loss"], kind="loss")
    dump.close()


def check_two_grids(folder, whole):
    manifest, full = read_dump(folder)
    assert manifest["version"] == 3 and manifest["meshes"] == {"encoder": [{"name": "dp", "size": 2}]}, manifest
    assert [(r["coords"], r["mesh_coords"]) for r in manifest["ranks"]] == \
        [([0, 0], {"encoder": [1]}), ([0, 1], {"encoder": [0]})], manifest["ranks"]
    assert [(r["name"], r["mesh"], r["shape"]) for r in manifest["records"]] == \
        [("patches", "encoder", [5, 3]), ("sequence", "", [2, 8]), ("encoder.w", "encoder", [4]),
         ("loss", "encoder", [])], manifest["records"]
    for (name, *_), tensor in full.items():
        assert torch.allclose(tensor, whole[name], rtol=1e-15, atol=0), name


def share_named_coords(rank, world, folder):
    """Both ranks at encoder coordinate [0]: every rank's close() raises naming the grid, no manifest."""
    dump = Dump(folder, meshes={"encoder": [("dp", 2)]}, mesh_coords={"encoder": [0]})
    dump.record("x", torch.zeros(2), kind="activation", mesh="encoder", placements=[replicate()])
    try:
        dump.close()
    except ValueError as e:
        assert "mesh_coords 'encoder'" in str(e) and "ranks 0 and 1" in str(e), e
    else:
        raise AssertionError(f"rank {rank}: close() accepted two ranks at one encoder coordinate")
    assert not os.path.exists(os.path.join(folder, "manifest.json"))


def check_magic_compare_reads_the_writer(binary, tmp, folders, whole, grids):
    every = os.path.join(tmp, "every-dtype.dump")
    dump = Dump(every)
    for name, tensor in every_dtype().items():
        dump.record(name, tensor, kind="other", phase="other", order="forward")
    dump.close()
    code, report, output = run_magic_compare(binary, every, every, tmp)
    assert code == 0 and len(report["records"]) == len(every_dtype()), output

    single = os.path.join(tmp, "whole.dump")
    dump = Dump(single)
    record_declared(dump, whole, {name: None for name in whole})
    dump.close()
    code, report, output = run_magic_compare(binary, folders["mesh.dump"], single, tmp)
    assert code == 0 and len(report["records"]) == len(whole), output
    print(output)

    grids_whole = os.path.join(tmp, "two-grids-whole.dump")
    record_two_grids_whole(grids_whole, grids)
    code, report, output = run_magic_compare(binary, folders["grids.dump"], grids_whole, tmp)
    assert code == 0 and len(report["records"]) == 4, output
    print(output)

    nan = os.path.join(tmp, "nan.dump")
    dump = Dump(nan)
    dump.record("finite", torch.ones(2), kind="activation")
    dump.record("not-finite", torch.tensor([1.0, math.nan]), kind="activation")
    dump.close()
    done = subprocess.run([binary, nan, nan], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not-finite" in done.stderr and "NaN" in done.stderr, done.stderr
    print(done.stderr.strip())


def record_differently(rank, world, folder):
    """Rank 1 records a different name: every rank must raise, none may hang, no manifest."""
    dump = Dump(folder)
    dump.record("x" if rank == 0 else "y", torch.zeros(2), kind="activation", placements=[replicate()])
    try:
        dump.close()
    except ValueError as e:
        assert "differs in name" in str(e), e
    else:
        raise AssertionError(f"rank {rank}: close() accepted records that differ between ranks")
    assert not os.path.exists(os.path.join(folder, "manifest.json"))


def write_held_pieces(rank, world, folder, whole):
    """Mesh pp=2: "first" on stage 0 only, "last" on stage 1 only, "tied" a partial sum over both."""
    dump = Dump(folder, run="held", mesh=[("pp", 2)])
    if rank == 0:
        dump.record("first", whole["first"], kind="activation", placements=[replicate(on=[0])])
    dump.record("tied", whole["tied"] * (0.25 + 0.5 * rank), kind="gradient", placements=[partial("sum", on=[0, 1])])
    if rank == 1:
        dump.record("last", whole["last"], kind="activation", placements=[replicate(on=[1])])
    dump.close()


def check_held_pieces(folder, whole):
    manifest, full = read_dump(folder)
    assert manifest["version"] == 4 and manifest["meshes"] == {}, manifest
    assert [(r["name"], r["placements"]) for r in manifest["records"]] == \
        [("first", [{"type": "replicate", "on": [0]}]), ("tied", [{"type": "partial", "reduce": "sum", "on": [0, 1]}]),
         ("last", [{"type": "replicate", "on": [1]}])], manifest["records"]
    files = [read_safetensors(os.path.join(folder, f"rank{r}.safetensors")) for r in range(2)]
    assert [len(f) for f in files] == [2, 2], [list(f) for f in files]
    for (name, *_), tensor in full.items():
        assert torch.allclose(tensor, whole[name], rtol=1e-15, atol=0), name


def leave_out_a_holder(rank, world, folder):
    """Rank 1 does not record what its placements say both stages hold: every rank raises naming
    the makers and the holders, no manifest."""
    dump = Dump(folder, mesh=[("pp", 2)])
    if rank == 0:
        dump.record("x", torch.zeros(2), kind="activation", placements=[replicate(on=[0, 1])])
    try:
        dump.close()
    except ValueError as e:
        assert "made by ranks [0], but its placements give pieces to ranks [0, 1]" in str(e), e
    else:
        raise AssertionError(f"rank {rank}: close() accepted a record missing from one of its holders")
    assert not os.path.exists(os.path.join(folder, "manifest.json"))


def declared_tensors():
    generator = torch.Generator().manual_seed(11)
    return {name: torch.randn(*shape, generator=generator, dtype=torch.float64)
            for name, shape in (("sequence", (2, 8)), ("rows", (5, 3)), ("same", (4,)), ("average", (3,)),
                                ("fused", (6, 2)), ("padded", (3, 2)))}


def two_grid_tensors():
    generator = torch.Generator().manual_seed(13)
    return {name: torch.randn(shape, generator=generator, dtype=torch.float64)
            for name, shape in (("patches", (5, 3)), ("sequence", (2, 8)), ("encoder.w", (4,)), ("loss", ()))}


def main():
    args = arguments(__doc__.splitlines()[0])
    with private_temporary_folder() as tmp:
        check_safetensors(tmp)
        check_single_process_manifest(tmp)
        check_micro_batches(tmp)
        check_refusals(tmp)
        check_version_2_unless_meshes_are_named(tmp)
        whole, grids = declared_tensors(), two_grid_tensors()
        folders = {name: os.path.join(tmp, name)
                   for name in ("placements.dump", "mesh.dump", "differ.dump", "grids.dump", "shared.dump",
                                "held.dump", "unheld.dump")}
        held = {"first": torch.arange(6.0, dtype=torch.float64).reshape(2, 3), "tied": torch.ones(2, 2).double(),
                "last": torch.linspace(0, 1, 4, dtype=torch.float64)}
        run_on_ranks(2, [(check_placement_refusals_on_a_mesh, {"folder": folders["placements.dump"]}),
                         (write_declared_mesh, {"folder": folders["mesh.dump"], "whole": whole}),
                         (record_differently, {"folder": folders["differ.dump"]}),
                         (write_two_grids, {"folder": folders["grids.dump"], "whole": grids}),
                         (share_named_coords, {"folder": folders["shared.dump"]}),
                         (write_held_pieces, {"folder": folders["held.dump"], "whole": held}),
                         (leave_out_a_holder, {"folder": folders["unheld.dump"]})])
        check_held_pieces(folders["held.dump"], held)
        manifest, full = read_dump(folders["mesh.dump"])
        assert manifest["version"] == 2 and "meshes" not in manifest, manifest
        assert manifest["mesh"] == [{"name": "dp", "size": 1}, {"name": "cp", "size": 2}], manifest["mesh"]
        assert [r["coords"] for r in manifest["ranks"]] == [[0, 0], [0, 1]], manifest["ranks"]
        assert all(list(r) == ["rank", "coords", "file"] for r in manifest["ranks"]), manifest["ranks"]
        assert all("mesh" not in r for r in manifest["records"]), manifest["records"]
        for (name, *_), tensor in full.items():
            assert torch.equal(tensor, whole[name]), name
        check_two_grids(folders["grids.dump"], grids)
        _, uneven = read_dump(folders["placements.dump"])
        assert list(uneven.values())[0].shape == (3, 2)
        if args.magic_compare:
            check_magic_compare_reads_the_writer(args.magic_compare, tmp, folders, whole, grids)
    print("PASS: magic_dump writes the format and refuses what it must")
    return 0


if __name__ == "__main__":
    sys.exit(main())
