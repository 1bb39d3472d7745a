"""The tests' own reader of a magic-dump folder (docs/dump-format.md, versions 1 to 4), written from
the document and independent of python/magic_dump.py: it parses the safetensors files byte by byte,
checks what the format requires of them, and reassembles every record to its full tensor by its
placements on the record's grid (version 3's named meshes), from the ranks that hold a piece
(version 4's `on`). It is the oracle for the writer;
magic-compare is the reader under test elsewhere.
"""

import json
import os
import struct

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
IDENTITY = ("name", "kind", "phase", "order", "step", "micro_batch")


def read_safetensors(path):
    """{key: tensor} in header order; AssertionError naming the file when a byte is out of place."""
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) >= 8, f"{path}: shorter than the 8-byte header length"
    (header_len,) = struct.unpack("<Q", data[:8])
    assert 8 + header_len <= len(data), f"{path}: header length {header_len} runs past the end"
    assert header_len % 8 == 0, f"{path}: header of {header_len} bytes is not padded to 8"
    text = data[8:8 + header_len].decode("utf-8")
    json_text = text.rstrip(" ")
    assert len(text) - len(json_text) < 8, f"{path}: {len(text) - len(json_text)} bytes of padding"
    header = json.loads(json_text)
    body = data[8 + header_len:]
    tensors, next_offset = {}, 0
    for key, entry in header.items():
        assert key != "__metadata__", f"{path}: a dump's file holds records only"
        assert set(entry) == {"dtype", "shape", "data_offsets"}, f"{path}: {key} has fields {sorted(entry)}"
        dtype = DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        # The writer lays tensors out in order without holes, as the safetensors format requires.
        assert begin == next_offset and begin <= end <= len(body), f"{path}: {key} offsets {begin}..{end}"
        numel = 1
        for n in entry["shape"]:
            numel *= n
        item_size = torch.empty((), dtype=dtype).element_size()
        assert end - begin == numel * item_size, f"{path}: {key} holds {end - begin} bytes for shape {entry['shape']}"
        raw = bytearray(body[begin:end])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[key] = flat.reshape(entry["shape"])
        next_offset = end
    assert next_offset == len(body), f"{path}: {len(body) - next_offset} bytes after the last tensor"
    return tensors


def read_dump(folder):
    """(manifest, {identity: full tensor}) with identities in record order."""
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    version = manifest["version"]
    assert manifest["format"] == "magic-dump" and version in (1, 2, 3, 4), version
    for record in manifest["records"]:
        # Version 2 on states every record's micro-batch; a version 1 record is a whole step's.
        assert ("micro_batch" in record) == (version >= 2), f"{record['key']}: micro_batch"
        record.setdefault("micro_batch", -1)
    grids, coords_on = checked_grids(manifest)
    files = [read_safetensors(os.path.join(folder, r["file"])) for r in manifest["ranks"]]
    full, held = {}, [set() for _ in files]
    for record in manifest["records"]:
        grid = record.get("mesh", "")
        assert grid in grids, f"{record['key']}: mesh {grid!r} is not '' or a name in meshes"
        assert len(record["placements"]) == len(grids[grid]), f"{record['key']}: one placement per {grid!r} dimension"
        assert version >= 4 or all("on" not in p for p in record["placements"]), f"{record['key']}: on is version 4"
        pieces = {}
        for rank, tensors, keys in zip(manifest["ranks"], files, held):
            coords = coords_on[grid][rank["rank"]]
            if not all("on" not in p or c in p["on"] for p, c in zip(record["placements"], coords)):
                continue  # a rank off the coordinates that hold a piece holds none
            keys.add(record["key"])
            piece = tensors[record["key"]]
            assert piece.dtype == DTYPES[record["dtype"]], f"{record['name']}: piece dtype {piece.dtype}"
            pieces[coords] = piece
        try:
            tensor = reassemble(pieces, grids[grid], record["placements"])
        except AssertionError as e:
            raise AssertionError(f"{folder}: record {record['key']} ({record['name']} {record['kind']}): {e}") from e
        assert list(tensor.shape) == record["shape"], f"{record['name']}: {list(tensor.shape)} != {record['shape']}"
        identity = tuple(record[f] for f in IDENTITY)
        assert identity not in full, f"{identity} twice"
        full[identity] = tensor
    for rank, tensors, keys in zip(manifest["ranks"], files, held):
        assert set(tensors) == keys, f"rank {rank['rank']}'s file holds {sorted(set(tensors) - keys)} beyond its pieces"
    return manifest, full


def checked_grids(manifest):
    """({grid name: dimensions}, {grid name: {rank: coords tuple}}): the main mesh under "" and, in
    version 3, every named mesh; each a grid of the world with every rank at distinct coordinates."""
    version, ranks = manifest["version"], manifest["ranks"]
    if version < 3:  # the fields of named meshes belong to version 3 alone
        assert "meshes" not in manifest, f"version {version} has no meshes"
        assert all("mesh_coords" not in r for r in ranks), f"version {version} has no mesh_coords"
        assert all("mesh" not in r for r in manifest["records"]), f"version {version} records have no mesh"
        meshes = {}
    else:
        meshes = manifest["meshes"]
        assert isinstance(meshes, dict) and all(isinstance(n, str) and n for n in meshes), f"meshes {meshes}"
        for r in ranks:
            assert set(r["mesh_coords"]) == set(meshes), f"rank {r['rank']}: mesh_coords {r['mesh_coords']}"
    world = len(ranks)
    assert sorted(r["rank"] for r in ranks) == list(range(world)), "ranks are not 0..world-1 once each"
    grids = {"": manifest["mesh"], **meshes}
    coords_on = {}
    for name, dims in grids.items():
        names = [d["name"] for d in dims]
        assert len(set(names)) == len(names) and all(d["size"] >= 1 for d in dims), f"mesh {name!r}: {dims}"
        size = 1
        for d in dims:
            size *= d["size"]
        assert size == world, f"mesh {name!r}: sizes multiply to {size}, {world} ranks"
        coords_on[name] = {r["rank"]: tuple(r["coords"] if name == "" else r["mesh_coords"][name]) for r in ranks}
        for coords in coords_on[name].values():
            assert len(coords) == len(dims) and all(0 <= c < d["size"] for c, d in zip(coords, dims)), \
                f"mesh {name!r}: coordinates {coords}"
        assert len(set(coords_on[name].values())) == world, f"mesh {name!r}: two ranks at the same coordinates"
    return grids, coords_on


def reassemble(pieces, mesh, placements):
    """Combine {coords: piece} from the innermost mesh dimension outwards; along a dimension whose
    placement says `on`, exactly those coordinates hold pieces."""
    for d in reversed(range(len(mesh))):
        groups = {}
        for coords, piece in pieces.items():
            groups.setdefault(coords[:d] + coords[d + 1:], []).append((coords[d], piece))
        expected = placements[d].get("on", list(range(mesh[d]["size"])))
        for rest, members in groups.items():
            assert sorted(c for c, _ in members) == expected, f"pieces at {sorted(c for c, _ in members)}, on {expected}"
        pieces = {rest: combine([p for _, p in sorted(members, key=lambda m: m[0])], placements[d])
                  for rest, members in groups.items()}
    (tensor,) = pieces.values()
    return tensor


def combine(pieces, placement):
    kind = placement["type"]
    if kind == "replicate":
        for p in pieces[1:]:
            assert torch.equal(p, pieces[0]), "replicas differ"
        return pieces[0]
    if kind == "shard":
        dim, parts = placement["dim"], placement.get("parts", 1)
        # A fused shard: each piece is its shard of every part in turn; part j is the pieces' j-th chunks.
        split = [p.chunk(parts, dim=dim) if parts > 1 else (p,) for p in pieces]
        whole = torch.cat([split[i][j] for j in range(parts) for i in range(len(pieces))], dim=dim)
        return whole.narrow(dim, 0, placement["length"]) if "length" in placement else whole
    if kind == "zigzag":
        dim, n = placement["dim"], len(pieces)
        chunks = [None] * (2 * n)
        for i, p in enumerate(pieces):
            chunks[i], chunks[2 * n - 1 - i] = p.chunk(2, dim=dim)
        return torch.cat(chunks, dim=dim)
    if kind == "partial":
        total = torch.stack(pieces).sum(dim=0)
        return total / len(pieces) if placement["reduce"] == "avg" else total
    raise AssertionError(f"unknown placement {placement}")


def worst_relative_error(actual, expected):
    """max |actual - expected| / max |expected| (the whole tensor's scale, so tiny entries do not
    dominate); 0 for two zero tensors."""
    scale = expected.abs().max().item() if expected.numel() else 0.0
    diff = (actual - expected).abs().max().item() if expected.numel() else 0.0
    return diff / scale if scale else diff
