// magic-compare: judges one run's dump against another's (docs/magic-compare.md): a team's own
// distributed code against its single-process run, record by record, naming the first
// divergence; or another implementation's scores against magic-run's. Exit 0 every record
// within tolerance, 1 a record off, 2 a dump refused or bad flags.
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "lib/core/error.h"
#include "lib/core/process_exit.h"
#include "lib/core/strings.h"
#include "lib/io/output_path.h"
#include "lib/trace/compare_report.h"
#include "lib/trace/dump_reader.h"
#include "lib/trace/score_dump.h"
#include "lib/train/memory_estimate.h"

namespace {

using namespace magic;
namespace fs = std::filesystem;

struct Flags {
  std::string candidate, reference, json, junit;
  std::optional<double> tolerance;
};

bool is_score_input(const std::string& path) {
  if (fs::is_directory(path))
    return !fs::exists(fs::path(path) / "manifest.json") && fs::exists(fs::path(path) / "scores.safetensors");
  return fs::path(path).extension() == ".safetensors";
}

std::string layout_of(const LoadedDump& d) {
  if (d.manifest.mesh.empty()) return "single process";
  return str_cat(grids_text(d.manifest), ", ", d.manifest.ranks.size(), " ranks");
}

// Both dumps are held whole while they are compared (dump_resident_bytes), with what the allocator
// keeps of each record's temporaries (measured at 17 to 20% on 1 GiB dumps: docs/magic-compare.md,
// "Memory") and LibTorch itself: need = 1.25 * (A + B) + 256 MiB. Refused before either dump is
// read when that would not fit in the memory this machine has available.
void require_memory_for_dumps(const std::string& a, const std::string& b) {
  const double need_a = dump_resident_bytes(a), need_b = dump_resident_bytes(b);
  const double need = 1.25 * (need_a + need_b) + 256.0 * (1 << 20);
  const int64_t available = available_memory_bytes();
  if (available <= 0 || need <= static_cast<double>(available)) return;
  // Named by the larger: the one a hostile or mistaken manifest makes huge.
  const bool a_larger = need_a >= need_b;
  throw InputError(str_cat(a_larger ? a : b, ": comparing it with ", a_larger ? b : a, " needs about ",
                           format_bytes(need), " (", format_bytes(a_larger ? need_a : need_b), " and ",
                           format_bytes(a_larger ? need_b : need_a),
                           ": their files read whole and their records put together, as their manifests say; a "
                           "quarter more for the allocator, 256 MiB for LibTorch), but this machine has ",
                           format_bytes(static_cast<double>(available)), " available"));
}

void compare(const Flags& flags, CompareReport& report) {
  const bool scores_a = is_score_input(flags.candidate), scores_b = is_score_input(flags.reference);
  if (scores_a != scores_b) {
    throw InputError(str_cat(scores_a ? flags.candidate : flags.reference, " is a score file but ",
                             scores_a ? flags.reference : flags.candidate,
                             " is not: compare two dumps or two score files"));
  }
  CompareOptions options;
  options.tolerance = flags.tolerance;
  if (scores_a) {
    const ScoreDump a = read_score_dump(flags.candidate), b = read_score_dump(flags.reference);
    report.candidate_layout = report.reference_layout = "scores";
    report.comparison = compare_dumps(aligned_scores(a, b), b.dump, options);
    return;
  }
  require_memory_for_dumps(flags.candidate, flags.reference);
  const LoadedDump a = read_dump(flags.candidate), b = read_dump(flags.reference);
  report.candidate_layout = layout_of(a);
  report.reference_layout = layout_of(b);
  report.comparison = compare_dumps(a, b, options);
}

int run(int argc, char** argv) {
  CLI::App app{
      "magic-compare: compare a run's dump with a reference run's, record by record, and name the first "
      "divergence.\nExample: magic-compare ddp.dump single.dump --json report.json"};
  Flags flags;
  app.add_option("A", flags.candidate, "the dump (or scores.safetensors) to judge")->required();
  app.add_option("B", flags.reference, "the dump (or scores.safetensors) to judge it against: the reference")
      ->required();
  app.add_option("--json", flags.json, "also write the report as JSON to this file");
  app.add_option("--junit", flags.junit, "also write the report as JUnit XML to this file");
  app.add_option("--tolerance", flags.tolerance,
                 "largest worst relative error that passes (default: by dtype, fp64 1e-9, fp32 1e-4, bf16 3e-2, "
                 "fp16 1e-2; integers exact)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "magic-compare: error: " << e.what() << " (run with --help for usage)\n";
    return kExitBadInput;
  }
  CompareReport report;
  report.candidate = flags.candidate;
  report.reference = flags.reference;
  const auto start = std::chrono::steady_clock::now();
  try {
    if (!flags.json.empty()) require_writable_file(flags.json, "--json");
    if (!flags.junit.empty()) require_writable_file(flags.junit, "--junit");
  } catch (const std::exception& e) {
    std::cerr << "magic-compare: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  try {
    if (flags.tolerance && !(*flags.tolerance >= 0 && std::isfinite(*flags.tolerance))) {
      throw InputError(str_cat("--tolerance: expected a finite number >= 0, got ", *flags.tolerance));
    }
    compare(flags, report);
  } catch (const std::exception& e) {
    // One line, whatever failed: a refused dump is the common case (InputError).
    report.failure = e.what();
    std::cerr << "magic-compare: error: " << e.what() << "\n";
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (report.failure.empty()) print_compare_report(report, std::cout);
  // The reports are written on every exit path, a refused dump included.
  try {
    if (!flags.json.empty()) write_compare_json(flags.json, report);
    if (!flags.junit.empty()) write_compare_junit(flags.junit, report);
  } catch (const std::exception& e) {
    std::cerr << "magic-compare: error: " << e.what() << "\n";
    return kExitBadInput;
  }
  return report.exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  magic::exit_without_static_destructors(run(argc, argv));
}
