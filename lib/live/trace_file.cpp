#include "lib/live/trace_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"

namespace magic {
namespace {

std::string padded(int64_t n, int width) {
  std::string digits = std::to_string(n);
  return std::string(digits.size() < static_cast<size_t>(width) ? width - digits.size() : 0, '0') + digits;
}

}  // namespace

std::string trace_tensor_file_name(const std::string& prefix, int64_t index) {
  return prefix + "tensors-" + padded(index, 5) + ".safetensors";
}

TraceFile::TraceFile(std::string folder, std::string prefix, size_t tensor_file_bytes)
    : folder_(std::move(folder)), prefix_(std::move(prefix)), tensor_file_bytes_(tensor_file_bytes) {
  std::error_code ec;
  created_folder_ = !std::filesystem::exists(folder_);
  std::filesystem::create_directories(folder_, ec);
  records_path_ = (std::filesystem::path(folder_) / (prefix_ + "records.jsonl")).string();
  records_ = std::fopen(records_path_.c_str(), "w");
  if (records_ == nullptr) throw InputError(str_cat("--trace-file ", records_path_, ": ", std::strerror(errno)));
}

TraceFile::~TraceFile() {
  try {
    close();
  } catch (...) {
    // A destructor that runs while a failure unwinds must not throw; close() reported it if it could.
  }
}

void TraceFile::publish(const std::shared_ptr<const TraceEvent>& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (records_ == nullptr) return;
  std::string line = event->text;
  if (event->tensor.defined()) {
    const std::string key = "r" + padded(event->seq, 6);
    // The message is one JSON object: the tensor's place goes in before its closing brace.
    const nlohmann::json place = {{"file", trace_tensor_file_name(prefix_, tensor_files_)}, {"key", key}};
    line.insert(line.rfind('}'), ",\"tensor\":" + place.dump());
    pending_.insert(key, event->tensor);
    pending_bytes_ += event->tensor.numel() * event->tensor.element_size();
  }
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), records_) != line.size() || std::fflush(records_) != 0) {
    fail(str_cat(records_path_, ": write failed (", std::strerror(errno), ")"));
    return;
  }
  if (pending_bytes_ >= tensor_file_bytes_) flush_or_fail();
}

// A trace that could not be written whole (a full disk) is removed, so that the same command run
// again finds its folder new; the failure is thrown by close(), naming the file.
void TraceFile::fail(const std::string& why) {
  failure_ = why;
  if (records_ != nullptr) std::fclose(records_);
  records_ = nullptr;
  remove_files();
}

void TraceFile::flush_or_fail() {
  try {
    flush_tensors();
  } catch (const InputError& e) {
    fail(e.what());
  }
}

void TraceFile::flush_tensors() {
  if (pending_.size() == 0) return;
  save_safetensors((std::filesystem::path(folder_) / trace_tensor_file_name(prefix_, tensor_files_)).string(),
                   pending_);
  ++tensor_files_;
  pending_ = TensorTree();
  pending_bytes_ = 0;
}

void TraceFile::remove() {
  std::lock_guard<std::mutex> lock(mutex_);
  remove_files();
}

void TraceFile::remove_files() {
  std::error_code ec;
  std::filesystem::remove(records_path_, ec);
  for (int64_t i = 0; i < tensor_files_; ++i) {
    std::filesystem::remove(std::filesystem::path(folder_) / trace_tensor_file_name(prefix_, i), ec);
  }
  if (created_folder_ && std::filesystem::is_empty(folder_, ec)) std::filesystem::remove(folder_, ec);
}

void TraceFile::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (records_ != nullptr) {
    flush_or_fail();
    if (records_ != nullptr) {
      const bool closed = std::fclose(records_) == 0;
      records_ = nullptr;
      if (!closed) fail(str_cat(records_path_, ": write failed on close (", std::strerror(errno), ")"));
    }
  }
  if (!failure_.empty()) throw InputError(str_cat("--trace-file ", std::exchange(failure_, "")));
}

}  // namespace magic
