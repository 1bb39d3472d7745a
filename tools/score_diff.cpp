// magic-score-diff: how far two magic-run score files (or the --out folders holding them) are
// apart, for checking a distributed run against a single-process one, or a resumed run against an
// uninterrupted one.
//   relative error  max |a - b| / max |b|   (b: the second file, the reference)
//   bit-identical   every byte of the two score tensors equal
// Exit 0 when the relative error is within --tolerance, 1 when not, 2 for unreadable or
// mismatched files (different example ids or shapes).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstring>
#include <iostream>

#include "lib/compare/correlation.h"
#include "lib/core/error.h"
#include "lib/core/strings.h"
#include "lib/io/safetensors.h"
#include "lib/io/score_file.h"

namespace {

using namespace magic;

// `path`: a scores.safetensors file or magic-run's --out folder, as magic-compare takes them.
SafetensorsFile load_scores(const std::string& path) {
  const std::string file_path = score_file_in(path);
  SafetensorsFile file = load_safetensors(file_path);
  if (!file.tensors.contains("scores")) {
    throw InputError(file_path + ": no tensor 'scores' (not a magic-run score file)");
  }
  return file;
}

int run(int argc, char** argv) {
  CLI::App app{
      "magic-score-diff: compare two magic-run scores.safetensors files (or the --out folders holding them).\n"
      "Example: magic-score-diff out/dp2 out/single"};
  std::string a_path, b_path;
  double tolerance = 1e-10;
  app.add_option("A", a_path, "scores.safetensors (or a magic-run --out folder) to judge")->required();
  app.add_option("B", b_path, "scores.safetensors (or a --out folder) to judge it against (the reference)")->required();
  app.add_option("--tolerance", tolerance, "largest relative error that passes")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    throw InputError(str_cat(e.what(), " (run with --help for usage)"));
  }
  if (!std::isfinite(tolerance) || tolerance < 0) {
    throw InputError(str_cat("--tolerance: expected a finite number >= 0, got ", tolerance));
  }
  const SafetensorsFile a = load_scores(a_path), b = load_scores(b_path);
  if (a.metadata.at("example_ids") != b.metadata.at("example_ids")) {
    throw InputError(a_path + " and " + b_path + ": the example ids differ (scores of different data)");
  }
  const at::Tensor x = a.tensors.at("scores").contiguous(), y = b.tensors.at("scores").contiguous();
  if (!x.sizes().equals(y.sizes()) || x.scalar_type() != y.scalar_type()) {
    throw InputError(str_cat(a_path, " is ", x.sizes(), " ", x.scalar_type(), " but ", b_path, " is ", y.sizes(), " ",
                             y.scalar_type()));
  }
  const bool identical = std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
  const at::Tensor xd = x.to(at::kDouble), yd = y.to(at::kDouble);
  const double scale = yd.abs().max().item<double>();
  const double error = (xd - yd).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
  const bool pass = error <= tolerance;
  std::cout << "relative error " << format_sci(error, 3) << " (max |A - B| / max |B| over " << x.numel()
            << " scores), Spearman " << format_fixed(spearman(xd.reshape({-1}), yd.reshape({-1})), 12)
            << ", bit-identical: " << (identical ? "yes" : "no") << "\n"
            << (pass ? "within" : "ABOVE") << " the tolerance " << format_sci(tolerance, 1) << "\n";
  return pass ? kExitOk : kExitCheckFailed;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "magic-score-diff: error: " << e.what() << "\n";
    return magic::kExitBadInput;
  }
}
