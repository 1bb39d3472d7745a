#include "fuzz/fuzz_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lib/core/error.h"

namespace magic::fuzz {
namespace {

namespace fs = std::filesystem;

// Never destroyed: the exit handler that removes the folder runs after static destructors would.
const std::string& scratch() {
  static const std::string* path = [] {
    auto* pattern = new std::string((fs::temp_directory_path() / "magic-fuzz-XXXXXX").string());
    if (mkdtemp(pattern->data()) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch(), ec);
    });
    return pattern;
  }();
  return *path;
}

}  // namespace

std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

std::string scratch_file(const std::string& name, const std::string& content) {
  const fs::path path = fs::path(scratch()) / name;
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(content.data(), static_cast<std::streamsize>(content.size()));
  return path.string();
}

std::string scratch_folder(const std::string& name) {
  const fs::path path = fs::path(scratch()) / name;
  fs::remove_all(path);
  fs::create_directories(path);
  return path.string();
}

void refuse_only_by_name(const std::function<void()>& read) {
  try {
    read();
  } catch (const InputError& e) {
    // For reviewing what the refusals say (each should name its file, key or flag).
    static const bool show = std::getenv("MAGIC_FUZZ_SHOW_REFUSALS") != nullptr;
    if (show) std::fprintf(stderr, "refused: %s\n", e.what());
  }
}

std::vector<std::string> split_parts(const std::string& text, size_t most) {
  static const std::string kSeparator = "\n--8<--\n";
  std::vector<std::string> parts;
  size_t from = 0;
  for (size_t at; parts.size() + 1 < most && (at = text.find(kSeparator, from)) != std::string::npos;) {
    parts.push_back(text.substr(from, at - from));
    from = at + kSeparator.size();
  }
  parts.push_back(text.substr(from));
  return parts;
}

}  // namespace magic::fuzz
