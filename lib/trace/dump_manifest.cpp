#include "lib/trace/dump_manifest.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "lib/core/error.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"

namespace magic {
namespace {

using json = nlohmann::json;

// An integer field within [low, high], named in the error.
int64_t integer_in(const JsonFields& f, const std::string& key, int64_t low, int64_t high) {
  const int64_t x = f.integer(key);
  if (x < low || x > high) f.fail(key, str_cat("expected ", low, " to ", high, ", got ", x));
  return x;
}

std::string one_of(const JsonFields& f, const std::string& key, const std::vector<std::string>& allowed) {
  const std::string v = f.string(key);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    f.fail(key, str_cat("unknown value '", v, "' (expected one of ", join(allowed, ", "), ")"));
  }
  return v;
}

json array_of(const JsonFields& f, const std::string& key) {
  const json absent;
  const json& v = f.raw(key, absent);
  if (v.is_null()) f.fail(key, "missing; expected an array");
  if (!v.is_array()) f.fail(key, str_cat("expected an array, got ", v.dump()));
  return v;
}

// The element's fields, "records[3].kind" in messages.
JsonFields element(const std::string& path, const JsonFields& parent, const std::string& key, const json& array,
                   size_t i) {
  return JsonFields(array[i], path, str_cat(parent.field(key), "[", i, "]"));
}

// Sizes of a dump stay far below this; larger numbers are damage, refused before they multiply.
constexpr int64_t kMaxSize = int64_t{1} << 40;

Placement parse_placement(const JsonFields& f, int64_t version) {
  const std::string type = one_of(f, "type", {"replicate", "shard", "zigzag", "partial"});
  Placement p = Placement::replicate();
  if (type == "partial") {
    const std::string reduce = one_of(f, "reduce", {"sum", "avg"});
    p = Placement::partial(reduce == "sum" ? Placement::Reduce::kSum : Placement::Reduce::kAvg);
  } else if (type != "replicate") {
    const int64_t dim = integer_in(f, "dim", 0, 63);
    p = type == "shard" ? Placement::shard(dim) : Placement::zigzag(dim);
    // Version 1 knows a zig-zag's length only; what the other fields mean came with version 2.
    if (type == "shard" && version < 2) {
      for (const char* key : {"length", "parts"}) {
        if (f.has(key)) f.fail(key, "a shard's length or parts needs version 2");
      }
    }
    if (f.has("length")) p.length = integer_in(f, "length", 1, kMaxSize);
    if (type == "shard" && f.has("parts")) p.parts = integer_in(f, "parts", 1, 1 << 20);
    if (p.parts > 1 && p.length > 0) f.fail("parts", "a fused shard (parts) takes no length");
  }
  // Version 4: the coordinates that hold a piece (a pipeline stage's); their range is the caller's.
  if (f.has("on")) {
    if (version < 4)
      f.fail("on", str_cat("the coordinates holding a piece are version 4; this manifest says version ", version));
    const json& on = array_of(f, "on");
    if (on.empty()) f.fail("on", "expected the coordinates that hold a piece, got []");
    for (const auto& c : on) {
      if (!c.is_number_integer() || c.get<int64_t>() < 0 || (!p.on.empty() && c.get<int64_t>() <= p.on.back())) {
        f.fail("on", str_cat("expected ascending distinct coordinates, got ", on.dump()));
      }
      p.on.push_back(c.get<int64_t>());
    }
  }
  f.finish();
  return p;
}

// What a record is (its name, kind, phase, order, step, layer and micro-batch), read and checked
// alike in a manifest and in the record lists ranks exchange.
TraceRecord record_fields(const JsonFields& f, int64_t version) {
  TraceRecord r;
  r.name = f.string("name");
  if (r.name.empty()) f.fail("name", "empty");
  r.kind = one_of(f, "kind", trace_kinds());
  r.phase = one_of(f, "phase", trace_phases());
  r.order = one_of(f, "order", trace_orders());
  r.step = integer_in(f, "step", -1, kMaxSize);
  r.layer = f.string("layer");
  // Version 2 states every record's micro-batch; version 1 had none, so its records are whole steps.
  r.micro_batch = version >= 2 ? integer_in(f, "micro_batch", -1, kMaxSize) : -1;
  return r;
}

nlohmann::ordered_json type_json(const Placement& p) {
  switch (p.type) {
    case Placement::Type::kReplicate:
      return {{"type", "replicate"}};
    case Placement::Type::kShard:
      if (p.parts > 1) return {{"type", "shard"}, {"dim", p.dim}, {"parts", p.parts}};
      if (p.length > 0) return {{"type", "shard"}, {"dim", p.dim}, {"length", p.length}};
      return {{"type", "shard"}, {"dim", p.dim}};
    case Placement::Type::kZigzag:
      if (p.length > 0) return {{"type", "zigzag"}, {"dim", p.dim}, {"length", p.length}};
      return {{"type", "zigzag"}, {"dim", p.dim}};
    case Placement::Type::kPartial:
      return {{"type", "partial"}, {"reduce", p.reduce == Placement::Reduce::kSum ? "sum" : "avg"}};
  }
  return {};
}

nlohmann::ordered_json placement_json(const Placement& p) {
  nlohmann::ordered_json out = type_json(p);
  if (!p.on.empty()) out["on"] = p.on;
  return out;
}

// A grid's dimensions from `array` (parent's field `key`): names unique and non-empty, sizes >= 1,
// at most 2^20 ranks; returns the dimensions and their product.
std::pair<std::vector<MeshDim>, int64_t> parse_grid(const std::string& path, const JsonFields& parent,
                                                    const std::string& key, const json& array) {
  std::vector<MeshDim> grid;
  int64_t world = 1;
  std::set<std::string> names;
  for (size_t i = 0; i < array.size(); ++i) {
    const JsonFields f = element(path, parent, key, array, i);
    MeshDim d{f.string("name"), integer_in(f, "size", 1, 1 << 20)};
    if (d.name.empty() || !names.insert(d.name).second) {
      f.fail("name", str_cat("expected a unique non-empty name, got '", d.name, "'"));
    }
    world *= d.size;
    if (world > (1 << 20)) parent.fail(key, "more than 2^20 ranks");
    f.finish();
    grid.push_back(d);
  }
  return {grid, world};
}

// A rank's coordinates on `grid` from `coords` (f's field `key`): one per dimension, each within
// its size.
std::vector<int64_t> parse_coords(const JsonFields& f, const std::string& key, const json& coords,
                                  const std::vector<MeshDim>& grid) {
  if (!coords.is_array() || coords.size() != grid.size()) {
    f.fail(key, str_cat("expected ", grid.size(), " coordinates, got ", coords.dump()));
  }
  std::vector<int64_t> out;
  for (size_t k = 0; k < coords.size(); ++k) {
    if (!coords[k].is_number_integer() || coords[k].get<int64_t>() < 0 || coords[k].get<int64_t>() >= grid[k].size) {
      f.fail(key, str_cat("coordinate ", k, " (", grid[k].name, ") must be 0 to ", grid[k].size - 1, ", got ",
                          coords.dump()));
    }
    out.push_back(coords[k].get<int64_t>());
  }
  return out;
}

bool plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

}  // namespace

std::string mesh_text(const std::vector<MeshDim>& mesh) {
  if (mesh.empty()) return "single process";
  std::vector<std::string> parts;
  for (const auto& d : mesh) parts.push_back(str_cat(d.name, "=", d.size));
  return join(parts, ",");
}

std::string grids_text(const DumpManifest& manifest) {
  std::string out = mesh_text(manifest.mesh);
  for (const auto& [name, grid] : manifest.meshes) out += str_cat("; ", name, ": ", mesh_text(grid));
  return out;
}

std::vector<MeshDim> DumpManifest::grid(const std::string& name) const {
  if (name.empty()) return mesh;
  std::vector<MeshDim> out = meshes.at(name);
  for (auto& d : out) d.name = str_cat(name, " ", d.name);
  return out;
}

std::vector<std::vector<int64_t>> DumpManifest::coords(const std::string& name) const {
  std::vector<std::vector<int64_t>> out;
  for (const auto& r : ranks) out.push_back(name.empty() ? r.coords : r.mesh_coords.at(name));
  return out;
}

std::map<std::string, PlacedGrid> DumpManifest::placed_grids() const {
  std::map<std::string, PlacedGrid> out{{"", {grid(""), coords("")}}};
  for (const auto& [name, dims] : meshes) out[name] = {grid(name), coords(name)};
  return out;
}

DumpManifest parse_dump_manifest(const std::string& text, const std::string& path) {
  require_json_nesting(text, path);
  json document;
  try {
    document = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(str_cat(path, ": not JSON (", json_error_text(e), ")"));
  }
  if (!document.is_object()) throw InputError(str_cat(path, ": expected a JSON object"));
  const JsonFields root(document, path);
  if (root.string("format") != "magic-dump") {
    root.fail("format", str_cat("expected \"magic-dump\", got \"", root.string("format"), "\""));
  }
  DumpManifest m;
  if (!document.contains("version") || !document["version"].is_number_integer() ||
      document["version"].get<int64_t>() < 1 || document["version"].get<int64_t>() > kDumpFormatVersion) {
    root.fail("version", str_cat("unknown version ", document.value("version", json()).dump(),
                                 " (this reader reads versions 1 to ", kDumpFormatVersion, ")"));
  }
  m.version = root.integer("version");
  m.run = root.string("run");

  const auto [mesh, world] = parse_grid(path, root, "mesh", array_of(root, "mesh"));
  m.mesh = mesh;
  // Version 3: further grids over the same ranks, by name.
  if (m.version < 3 && document.contains("meshes")) {
    root.fail("meshes", str_cat("named grids are version 3; this manifest says version ", m.version));
  }
  if (m.version >= 3) {
    const json absent;
    const json& meshes = root.raw("meshes", absent);
    if (!meshes.is_object()) root.fail("meshes", str_cat("expected an object of named grids, got ", meshes.dump()));
    const JsonFields named = root.object("meshes");
    for (const auto& [name, dims] : meshes.items()) {
      if (name.empty()) root.fail("meshes", "a grid with an empty name (the main grid is \"mesh\")");
      if (!dims.is_array()) named.fail(name, str_cat("expected an array of dimensions, got ", dims.dump()));
      const auto [grid, size] = parse_grid(path, named, name, dims);
      if (size != world) {
        named.fail(name, str_cat("the grid ", mesh_text(grid), " has ", size, " ranks, the mesh ", mesh_text(m.mesh),
                                 " has ", world));
      }
      m.meshes[name] = grid;
      named.raw(name, absent);  // read
    }
    named.finish();
  }

  const json& ranks = array_of(root, "ranks");
  if (static_cast<int64_t>(ranks.size()) != world) {
    root.fail("ranks",
              str_cat("the mesh ", mesh_text(m.mesh), " has ", world, " ranks but ", ranks.size(), " are listed"));
  }
  m.ranks.resize(world);
  std::vector<bool> seen(world, false);
  std::set<std::vector<int64_t>> coords_seen;
  std::map<std::string, std::set<std::vector<int64_t>>> named_coords_seen;
  std::set<std::string> files;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const JsonFields f = element(path, root, "ranks", ranks, i);
    const int64_t r = integer_in(f, "rank", 0, world - 1);
    if (seen[r]) f.fail("rank", str_cat("rank ", r, " is listed twice"));
    seen[r] = true;
    DumpRank entry{r, {}, f.string("file"), {}};
    if (!plain_file_name(entry.file)) {
      f.fail("file", str_cat("expected a file name inside the dump folder, got '", entry.file, "'"));
    }
    if (!files.insert(entry.file).second) f.fail("file", str_cat("'", entry.file, "' is listed twice"));
    const json& coords = array_of(f, "coords");
    entry.coords = parse_coords(f, "coords", coords, m.mesh);
    if (!coords_seen.insert(entry.coords).second) {
      f.fail("coords", str_cat("coordinates ", coords.dump(), " belong to two ranks"));
    }
    if (m.version >= 3) {
      const json absent;
      const json& named = f.raw("mesh_coords", absent);
      if (!named.is_object() || named.size() != m.meshes.size()) {
        f.fail("mesh_coords",
               str_cat("expected the coordinates on each named grid (", m.meshes.size(), "), got ", named.dump()));
      }
      const JsonFields on = f.object("mesh_coords");
      for (const auto& [name, grid] : m.meshes) {
        if (!named.contains(name)) f.fail("mesh_coords", str_cat("no coordinates on the grid '", name, "'"));
        entry.mesh_coords[name] = parse_coords(on, name, on.raw(name, absent), grid);
        if (!named_coords_seen[name].insert(entry.mesh_coords[name]).second) {
          on.fail(name, str_cat("coordinates ", named[name].dump(), " belong to two ranks"));
        }
      }
      on.finish();
    }
    f.finish();
    m.ranks[r] = entry;
  }

  const json& records = array_of(root, "records");
  std::set<std::string> keys, identities;
  for (size_t i = 0; i < records.size(); ++i) {
    const JsonFields f = element(path, root, "records", records, i);
    DumpRecord d;
    d.key = f.string("key");
    if (d.key.empty() || d.key == "__metadata__" || !keys.insert(d.key).second) {
      f.fail("key", str_cat("expected a unique tensor key, got '", d.key, "'"));
    }
    d.record = record_fields(f, m.version);
    TraceRecord& r = d.record;
    if (!identities.insert(record_identity(r)).second) {
      throw InputError(str_cat(f.where(), ": a second record of ", record_place(r)));
    }
    const std::string dtype = f.string("dtype");
    const auto type = safetensors_dtype(dtype);
    if (!type) f.fail("dtype", str_cat("unknown dtype '", dtype, "'"));
    d.dtype = *type;
    const json& shape = array_of(f, "shape");
    if (shape.size() > 16) f.fail("shape", "more than 16 dimensions");
    int64_t numel = 1;
    for (const auto& s : shape) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > kMaxSize) {
        f.fail("shape", str_cat("expected sizes 0 to 2^40, got ", shape.dump()));
      }
      d.shape.push_back(s.get<int64_t>());
      const int64_t size = std::max<int64_t>(d.shape.back(), 1);
      numel = numel > kMaxSize / size ? kMaxSize + 1 : numel * size;
    }
    if (numel > kMaxSize) f.fail("shape", str_cat("more than 2^40 elements: ", shape.dump()));
    if (m.version >= 3) {
      r.mesh = f.string("mesh");
      if (!r.mesh.empty() && !m.meshes.count(r.mesh)) {
        f.fail("mesh", str_cat("no grid named '", r.mesh, "' (expected \"\" for the main grid or a name in meshes)"));
      }
    }
    const size_t dims = r.mesh.empty() ? m.mesh.size() : m.meshes.at(r.mesh).size();
    const json& placements = array_of(f, "placements");
    if (placements.size() != dims) {
      f.fail("placements", str_cat("expected one per dimension of its grid", r.mesh.empty() ? "" : " '" + r.mesh + "'",
                                   " (", dims, "), got ", placements.size()));
    }
    for (size_t k = 0; k < placements.size(); ++k) {
      const JsonFields pf = element(path, f, "placements", placements, k);
      const Placement p = parse_placement(pf, m.version);
      if ((p.type == Placement::Type::kShard || p.type == Placement::Type::kZigzag) &&
          p.dim >= static_cast<int64_t>(d.shape.size())) {
        pf.fail("dim", str_cat("dimension ", p.dim, " of a ", d.shape.size(), "-dimensional tensor"));
      }
      const MeshDim& along = r.mesh.empty() ? m.mesh[k] : m.meshes.at(r.mesh)[k];
      if (!p.on.empty() && p.on.back() >= along.size) {
        pf.fail("on", str_cat("coordinate ", p.on.back(), " along ", along.name, ", whose size is ", along.size));
      }
      r.placements.push_back(p);
    }
    f.finish();
    m.records.push_back(std::move(d));
  }
  root.finish();
  return m;
}

std::string records_text(const std::vector<TraceRecord>& records) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& r : records) {
    nlohmann::ordered_json placements = nlohmann::ordered_json::array();
    for (const auto& p : r.placements) placements.push_back(placement_json(p));
    out.push_back({{"name", r.name},
                   {"kind", r.kind},
                   {"phase", r.phase},
                   {"order", r.order},
                   {"step", r.step},
                   {"layer", r.layer},
                   {"micro_batch", r.micro_batch},
                   {"mesh", r.mesh},
                   {"placements", placements}});
  }
  return out.dump();
}

std::vector<TraceRecord> parse_records_text(const std::string& text, const std::string& what) {
  json document;
  try {
    document = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(str_cat(what, ": not JSON (", json_error_text(e), ")"));
  }
  if (!document.is_array()) throw InputError(str_cat(what, ": expected an array of records"));
  const json root = {{"records", document}};
  const JsonFields parent(root, what);
  std::vector<TraceRecord> out;
  for (size_t i = 0; i < document.size(); ++i) {
    const JsonFields f = element(what, parent, "records", document, i);
    TraceRecord r = record_fields(f, kDumpFormatVersion);
    r.mesh = f.string("mesh");
    const json& placements = array_of(f, "placements");
    for (size_t k = 0; k < placements.size(); ++k) {
      r.placements.push_back(parse_placement(element(what, f, "placements", placements, k), kDumpFormatVersion));
    }
    f.finish();
    out.push_back(std::move(r));
  }
  return out;
}

std::string dump_manifest_json(const DumpManifest& m) {
  nlohmann::ordered_json root;
  root["format"] = "magic-dump";
  // Each version only where it is needed: a dump without named grids or held-on placements reads
  // as version 2 anywhere. Version 4 is version 3 with `on`.
  bool held_on = false;
  for (const auto& d : m.records) {
    for (const auto& p : d.record.placements) held_on = held_on || !p.on.empty();
  }
  const bool named = !m.meshes.empty() || held_on;
  root["version"] = held_on ? 4 : named ? 3 : 2;
  root["run"] = m.run;
  const auto grid_json = [](const std::vector<MeshDim>& grid) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& d : grid) out.push_back({{"name", d.name}, {"size", d.size}});
    return out;
  };
  root["mesh"] = grid_json(m.mesh);
  if (named) {
    root["meshes"] = nlohmann::ordered_json::object();
    for (const auto& [name, grid] : m.meshes) root["meshes"][name] = grid_json(grid);
  }
  root["ranks"] = nlohmann::ordered_json::array();
  for (const auto& r : m.ranks) {
    nlohmann::ordered_json rank = {{"rank", r.rank}, {"coords", r.coords}};
    if (named) rank["mesh_coords"] = r.mesh_coords;
    rank["file"] = r.file;
    root["ranks"].push_back(rank);
  }
  root["records"] = nlohmann::ordered_json::array();
  for (const auto& d : m.records) {
    nlohmann::ordered_json placements = nlohmann::ordered_json::array();
    for (const auto& p : d.record.placements) placements.push_back(placement_json(p));
    root["records"].push_back({{"key", d.key},
                               {"name", d.record.name},
                               {"kind", d.record.kind},
                               {"phase", d.record.phase},
                               {"order", d.record.order},
                               {"step", d.record.step},
                               {"layer", d.record.layer},
                               {"micro_batch", d.record.micro_batch},
                               {"dtype", safetensors_dtype_code(d.dtype)},
                               {"shape", d.shape},
                               {"placements", placements}});
    if (named) root["records"].back()["mesh"] = d.record.mesh;
  }
  return root.dump(1) + "\n";
}

}  // namespace magic
