// --trace-file: the tracer's records written as the run goes, for offline use (docs/tracer.md,
// "Files"): one JSON line per message in `records.jsonl`, and the whole tensor of each record
// kept by `none` in safetensors files of at most about 64 MiB each.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "lib/core/tensor_tree.h"
#include "lib/live/trace_event.h"

namespace magic {

class TraceFile : public TraceOutput {
 public:
  // Writes into `folder` (created), its files named `prefix` + "records.jsonl" and so on: a
  // rank of a mesh writes "rank1.records.jsonl". Throws InputError when the folder cannot be written.
  TraceFile(std::string folder, std::string prefix = "", size_t tensor_file_bytes = size_t{64} << 20);
  ~TraceFile() override;
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  void publish(const std::shared_ptr<const TraceEvent>& event) override;
  // Writes the held tensors and closes the file (also done by the destructor). Throws InputError
  // naming the file when a write failed; the writer's files are then removed.
  void close();
  const std::string& records_path() const { return records_path_; }
  // After close(): removes the files this writer made, and the folder when it is left empty.
  void remove();

 private:
  void flush_tensors();
  void flush_or_fail();
  void fail(const std::string& why);
  void remove_files();

  const std::string folder_;
  const std::string prefix_;
  const size_t tensor_file_bytes_;
  std::string records_path_;
  std::mutex mutex_;
  std::FILE* records_ = nullptr;
  TensorTree pending_;
  size_t pending_bytes_ = 0;
  int64_t tensor_files_ = 0;
  bool created_folder_ = false;
  std::string failure_;  // the first write that failed, thrown by close()
};

// "tensors-00003.safetensors" (with the prefix).
std::string trace_tensor_file_name(const std::string& prefix, int64_t index);

}  // namespace magic
