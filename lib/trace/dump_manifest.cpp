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
  f.finish();
  return p;
}

nlohmann::ordered_json placement_json(const Placement& p) {
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

DumpManifest parse_dump_manifest(const std::string& text, const std::string& path) {
  json document;
  try {
    document = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(str_cat(path, ": not JSON (", e.what(), ")"));
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
                                 " (this reader reads versions 1 and ", kDumpFormatVersion, ")"));
  }
  m.version = root.integer("version");
  m.run = root.string("run");

  const json& mesh = array_of(root, "mesh");
  int64_t world = 1;
  std::set<std::string> names;
  for (size_t i = 0; i < mesh.size(); ++i) {
    const JsonFields f = element(path, root, "mesh", mesh, i);
    MeshDim d{f.string("name"), integer_in(f, "size", 1, 1 << 20)};
    if (d.name.empty() || !names.insert(d.name).second) {
      f.fail("name", str_cat("expected a unique non-empty name, got '", d.name, "'"));
    }
    world *= d.size;
    if (world > (1 << 20)) root.fail("mesh", "more than 2^20 ranks");
    f.finish();
    m.mesh.push_back(d);
  }

  const json& ranks = array_of(root, "ranks");
  if (static_cast<int64_t>(ranks.size()) != world) {
    root.fail("ranks",
              str_cat("the mesh ", mesh_text(m.mesh), " has ", world, " ranks but ", ranks.size(), " are listed"));
  }
  m.ranks.resize(world);
  std::vector<bool> seen(world, false);
  std::set<std::vector<int64_t>> coords_seen;
  std::set<std::string> files;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const JsonFields f = element(path, root, "ranks", ranks, i);
    const int64_t r = integer_in(f, "rank", 0, world - 1);
    if (seen[r]) f.fail("rank", str_cat("rank ", r, " is listed twice"));
    seen[r] = true;
    DumpRank entry{r, {}, f.string("file")};
    if (!plain_file_name(entry.file)) {
      f.fail("file", str_cat("expected a file name inside the dump folder, got '", entry.file, "'"));
    }
    if (!files.insert(entry.file).second) f.fail("file", str_cat("'", entry.file, "' is listed twice"));
    const json& coords = array_of(f, "coords");
    if (coords.size() != m.mesh.size()) {
      f.fail("coords", str_cat("expected ", m.mesh.size(), " coordinates, got ", coords.dump()));
    }
    for (size_t k = 0; k < coords.size(); ++k) {
      if (!coords[k].is_number_integer() || coords[k].get<int64_t>() < 0 ||
          coords[k].get<int64_t>() >= m.mesh[k].size) {
        f.fail("coords", str_cat("coordinate ", k, " (", m.mesh[k].name, ") must be 0 to ", m.mesh[k].size - 1,
                                 ", got ", coords.dump()));
      }
      entry.coords.push_back(coords[k].get<int64_t>());
    }
    if (!coords_seen.insert(entry.coords).second) {
      f.fail("coords", str_cat("coordinates ", coords.dump(), " belong to two ranks"));
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
    TraceRecord& r = d.record;
    r.name = f.string("name");
    if (r.name.empty()) f.fail("name", "empty");
    r.kind = one_of(f, "kind", trace_kinds());
    r.phase = one_of(f, "phase", trace_phases());
    r.order = one_of(f, "order", trace_orders());
    r.step = integer_in(f, "step", -1, kMaxSize);
    r.layer = f.string("layer");
    // Version 2 states every record's micro-batch; version 1 had none, so its records are whole steps.
    r.micro_batch = m.version >= 2 ? integer_in(f, "micro_batch", -1, kMaxSize) : -1;
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
    const json& placements = array_of(f, "placements");
    if (placements.size() != m.mesh.size()) {
      f.fail("placements", str_cat("expected one per mesh dimension (", m.mesh.size(), "), got ", placements.size()));
    }
    for (size_t k = 0; k < placements.size(); ++k) {
      const JsonFields pf = element(path, f, "placements", placements, k);
      const Placement p = parse_placement(pf, m.version);
      if ((p.type == Placement::Type::kShard || p.type == Placement::Type::kZigzag) &&
          p.dim >= static_cast<int64_t>(d.shape.size())) {
        pf.fail("dim", str_cat("dimension ", p.dim, " of a ", d.shape.size(), "-dimensional tensor"));
      }
      r.placements.push_back(p);
    }
    f.finish();
    m.records.push_back(std::move(d));
  }
  root.finish();
  return m;
}

std::string dump_manifest_json(const DumpManifest& m) {
  nlohmann::ordered_json root;
  root["format"] = "magic-dump";
  root["version"] = kDumpFormatVersion;  // what is written is always the current version
  root["run"] = m.run;
  root["mesh"] = nlohmann::ordered_json::array();
  for (const auto& d : m.mesh) root["mesh"].push_back({{"name", d.name}, {"size", d.size}});
  root["ranks"] = nlohmann::ordered_json::array();
  for (const auto& r : m.ranks) root["ranks"].push_back({{"rank", r.rank}, {"coords", r.coords}, {"file", r.file}});
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
  }
  return root.dump(1) + "\n";
}

}  // namespace magic
