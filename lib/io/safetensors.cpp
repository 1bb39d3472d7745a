#include "lib/io/safetensors.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lib/core/error.h"
#include "lib/core/input_limits.h"
#include "lib/core/json_fields.h"
#include "lib/core/strings.h"
#include "lib/io/atomic_file.h"

namespace magic {
namespace {

struct DtypeCode {
  const char* code;
  c10::ScalarType type;
};

constexpr DtypeCode kDtypes[] = {
    {"F64", c10::kDouble}, {"F32", c10::kFloat}, {"F16", c10::kHalf}, {"BF16", c10::kBFloat16}, {"I64", c10::kLong},
    {"I32", c10::kInt},    {"I16", c10::kShort}, {"I8", c10::kChar},  {"U8", c10::kByte},       {"BOOL", c10::kBool},
};

}  // namespace

std::string safetensors_dtype_code(c10::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.code;
  }
  throw std::invalid_argument(str_cat("safetensors: unsupported dtype ", c10::toString(type)));
}

std::optional<c10::ScalarType> safetensors_dtype(const std::string& code) {
  for (const auto& d : kDtypes) {
    if (code == d.code) return d.type;
  }
  return std::nullopt;
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

void save_safetensors(const std::string& path, const TensorTree& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& e : tensors) {
    at::Tensor t = e.tensor.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = t.numel() * t.element_size();
    header[e.name] = {{"dtype", safetensors_dtype_code(t.scalar_type())},
                      {"shape", t.sizes().vec()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(t);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data section to 8 bytes
  const uint64_t header_size = text.size();

  write_file_atomically(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(&header_size), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : contiguous) {
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
    }
  });
}

SafetensorsFile load_safetensors(const std::string& path, SafetensorsRead read) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(str_cat(path, ": cannot open safetensors file"));
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  auto bad = [&](const std::string& why) { return InputError(str_cat(path, ": not a valid safetensors file: ", why)); };
  if (file_size < 8) throw bad("shorter than the 8-byte header length");
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  if (header_size > file_size - 8) throw bad(str_cat("header length ", header_size, " exceeds the file"));
  if (header_size > static_cast<uint64_t>(limits::kSafetensorsHeaderBytes)) {
    throw bad(str_cat("header length ", header_size, " exceeds the format's bound of ", limits::kSafetensorsHeaderBytes,
                      " bytes"));
  }
  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  require_json_nesting(text, str_cat(path, ": header"));
  nlohmann::ordered_json header;  // keeps the file's entry order
  try {
    header = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw bad(str_cat("header is not JSON: ", json_error_text(e)));
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_size;

  SafetensorsFile result;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) throw bad("__metadata__ is not a JSON object");
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string()) throw bad("__metadata__ values must be strings");
        result.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const auto& info = item.value();
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets")) {
      throw bad(str_cat("entry '", item.key(), "' needs dtype, shape and data_offsets"));
    }
    if (!info["dtype"].is_string()) throw bad(str_cat("entry '", item.key(), "' has a dtype that is not a string"));
    auto dtype = safetensors_dtype(info["dtype"].get<std::string>());
    if (!dtype) throw bad(str_cat("entry '", item.key(), "' has unsupported dtype ", info["dtype"].dump()));
    std::vector<int64_t> shape;
    std::vector<uint64_t> offsets;
    try {
      shape = info["shape"].get<std::vector<int64_t>>();
      offsets = info["data_offsets"].get<std::vector<uint64_t>>();
    } catch (const nlohmann::ordered_json::exception&) {
      throw bad(str_cat("entry '", item.key(), "' needs integer shape and data_offsets, got ", info.dump()));
    }
    if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size) {
      throw bad(str_cat("entry '", item.key(), "' has data_offsets ", info["data_offsets"].dump(), " outside the ",
                        data_size, "-byte data section"));
    }
    // The sizes are checked against the bytes the entry holds before anything is allocated: a
    // damaged header must not ask for a huge or negative tensor.
    uint64_t numel = 1;
    for (int64_t d : shape) {
      if (d < 0 || (d > 0 && numel > data_size / static_cast<uint64_t>(d))) {
        throw bad(str_cat("entry '", item.key(), "' has shape ", info["shape"].dump(), " larger than the file"));
      }
      numel *= static_cast<uint64_t>(d);
    }
    if (offsets[1] - offsets[0] != numel * c10::elementSize(*dtype)) {
      throw bad(str_cat("entry '", item.key(), "' holds ", offsets[1] - offsets[0], " bytes for shape ",
                        info["shape"].dump(), " of ", info["dtype"].get<std::string>()));
    }
    at::Tensor t;
    if (read == SafetensorsRead::kHeaderOnly) {
      t = at::empty(shape, at::TensorOptions().dtype(*dtype).device(at::kMeta));
    } else {
      t = at::empty(shape, at::TensorOptions().dtype(*dtype));
      in.seekg(static_cast<std::streamoff>(8 + header_size + offsets[0]));
      in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(offsets[1] - offsets[0]));
      if (!in) throw bad(str_cat("entry '", item.key(), "' could not be read"));
    }
    if (offsets[1] > offsets[0]) spans.push_back({offsets[0], offsets[1], item.key()});  // an empty one holds no bytes
    if (result.tensors.contains(item.key())) throw bad(str_cat("entry '", item.key(), "' appears twice"));
    result.tensors.insert(item.key(), t);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end)
      throw bad(str_cat("entries '", spans[i - 1].name, "' and '", spans[i].name, "' overlap"));
  }
  return result;
}

}  // namespace magic
