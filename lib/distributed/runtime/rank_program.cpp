#include "lib/distributed/runtime/rank_program.h"

#include <ATen/Parallel.h>

#include <iostream>
#include <map>
#include <streambuf>
#include <string>
#include <vector>

#include "lib/core/error.h"
#include "lib/core/ignored_sigpipe.h"
#include "lib/core/strings.h"
#include "lib/distributed/runtime/launcher.h"

namespace magic::dist {
namespace {

// Writes through to `out` and appends a copy to `copy`.
class TeeBuffer : public std::streambuf {
 public:
  TeeBuffer(std::streambuf& out, std::string& copy) : out_(out), copy_(copy) {}

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    copy_.push_back(static_cast<char>(c));
    return out_.sputc(static_cast<char>(c));
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    copy_.append(s, static_cast<size_t>(n));
    return out_.sputn(s, n);
  }
  int sync() override { return out_.pubsync(); }

 private:
  std::streambuf& out_;
  std::string& copy_;
};

// A failed run of rank threads, as the launcher tells a failed run of rank processes: the rank to
// blame, then one line per state of the others.
void report_thread_failure(const RankFailed& failed, const std::string& name, std::ostream& log) {
  log << name << ": " << failed.what() << "\n";
  std::map<int, std::string> state;
  for (int r = 0; r < failed.world_size(); ++r) state[r] = "finished";
  for (const auto& f : failed.all()) {
    const std::string phase = str_cat(" in phase '", f.phase.empty() ? "unknown" : f.phase, "'");
    if (f.own) {
      state[f.rank] = str_cat("failed with its own error", phase, ": ", f.kind, ": ", f.message);
    } else {
      state[f.rank] = str_cat("failed", f.waiting.empty() ? "" : " waiting in " + f.waiting, phase,
                              f.waiting.empty() ? ": " + f.kind : "");
    }
  }
  std::map<std::string, std::vector<std::string>> others;
  for (const auto& [rank, what] : state) {
    if (rank != failed.cause().rank) others[what].push_back(std::to_string(rank));
  }
  for (const auto& [what, members] : others) {
    log << name << ":   rank" << (members.size() > 1 ? "s " : " ") << join(members, ", ") << ": " << what << "\n";
  }
}

int run_threads(const RankProgram& program, const std::function<int(const Runtime&)>& body, std::ostream& log) {
  at::set_num_threads(1);
  // A thread whose peer thread failed and closed its sockets gets EPIPE from its next Gloo write
  // and fails naming itself (SIGPIPE would end the process: exit 141, seen with --timeout 0.001).
  const IgnoredSigpipe ignored_sigpipe;
  int exit_code = kExitOk;
  try {
    run_ranks_in_threads(
        static_cast<int>(program.topology.world_size()),
        [&](Runtime& runtime) {
          const int code = body(runtime);
          if (runtime.rank() == 0) exit_code = code;
        },
        program.timeout);
  } catch (const RankFailed& failed) {
    report_thread_failure(failed, program.name, log);
    if (program.failure != nullptr) *program.failure = failed.cause();
    return kExitBadInput;
  }
  return exit_code;
}

int run_spawned(const RankProgram& program, int argc, char** argv, std::ostream& log) {
  SpawnOptions spawn;
  spawn.argv.assign(argv, argv + argc);
  spawn.world_size = program.topology.world_size();
  spawn.timeout = program.timeout;
  spawn.name = program.name;
  spawn.progress_every = program.progress_every;
  spawn.progress = &std::cerr;  // not into launcher_messages: they become a failure's report
  spawn.failure = program.failure;
  if (program.entry) spawn.rank_main = [&program, argc, argv] { return program.entry(argc, argv); };
  return spawn_ranks(spawn, log);
}

}  // namespace

void RankProgram::validate() const {
  const bool threads = threads_allowed && launch == "threads";
  if (launch != "spawn" && launch != "env" && !threads) {
    throw InputError(str_cat("--launch ", launch, ": expected spawn", threads_allowed ? ", threads" : "", " or env"));
  }
  if (launch != "env" && topology.world_size() > kMaxSpawnedRanks) {
    throw InputError(str_cat("--topology ", topology.str(), ": a world of ", topology.world_size(),
                             " ranks is above the built-in launcher's limit of ", kMaxSpawnedRanks,
                             " on one machine; use --launch env under torchrun or srun for larger worlds"));
  }
}

bool ranks_share_memory(const RankProgram& program) {
  if (running_as_rank()) return false;
  return program.launch == "threads" || (program.launch == "spawn" && program.entry && single_threaded_process());
}

int run_rank_program(const RankProgram& program, int argc, char** argv,
                     const std::function<int(const Runtime&)>& body) {
  if (running_as_rank()) {
    // Ranks share the machine's cores: one intra-op thread each.
    at::set_num_threads(1);
    const Rendezvous rendezvous = Rendezvous::from_env();
    write_rank_pid_file(rendezvous.rank);
    if (rendezvous.world_size != program.topology.world_size()) {
      throw InputError(str_cat("WORLD_SIZE=", rendezvous.world_size, " but --topology ", program.topology.str(),
                               " needs ", program.topology.world_size(), " ranks"));
    }
    auto runtime = Runtime::connect(rendezvous, program.backend, program.timeout);
    int code = kExitOk;
    try {
      code = body(*runtime);
    } catch (const std::exception& e) {
      // Recorded while this rank's connections are open: a peer that fails once they close
      // fails after the record, and the launcher blames this rank, not that peer.
      runtime->record_failure(describe_failure(e, rendezvous.rank));
      throw;
    }
    runtime->keep_connections_until_exit();  // this process ends with the program
    return code;
  }
  if (program.launch == "env") {
    throw InputError("--launch env: RANK is not set; run under torchrun or srun, or use --launch spawn");
  }
  // The launcher's lines go to stderr and, for the tool's reports, to launcher_messages.
  std::string unused;
  TeeBuffer tee(*std::cerr.rdbuf(), program.launcher_messages != nullptr ? *program.launcher_messages : unused);
  std::ostream log(&tee);
  const int code =
      program.launch == "threads" ? run_threads(program, body, log) : run_spawned(program, argc, argv, log);
  log.flush();
  return code;
}

}  // namespace magic::dist
