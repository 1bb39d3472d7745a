#include "lib/live/trace_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

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
    const std::string key = "r" + padded(event->message.value("seq", int64_t{0}), 6);
    nlohmann::json m = event->message;
    m["tensor"] = {{"file", trace_tensor_file_name(prefix_, tensor_files_)}, {"key", key}};
    line = m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    pending_.insert(key, event->tensor);
    pending_bytes_ += event->tensor.numel() * event->tensor.element_size();
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), records_);
  std::fflush(records_);
  if (pending_bytes_ >= tensor_file_bytes_) flush_tensors();
}

void TraceFile::flush_tensors() {
  if (pending_.size() == 0) return;
  save_safetensors((std::filesystem::path(folder_) / trace_tensor_file_name(prefix_, tensor_files_)).string(),
                   pending_);
  ++tensor_files_;
  pending_ = TensorTree();
  pending_bytes_ = 0;
}

void TraceFile::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (records_ == nullptr) return;
  flush_tensors();
  std::fclose(records_);
  records_ = nullptr;
}

}  // namespace magic
