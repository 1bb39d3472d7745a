// The fuzz harnesses without libFuzzer, for the default suite: every input of the seed corpus,
// then `--mutants N` inputs made from them by seeded mutations (flips, cuts, repeats, splices and
// tokens a parser has to bound: deep brackets, aliases, huge numbers). Deterministic: the seed
// names every input, so a finding repeats. Exit 1 with the input's origin on a finding that
// throws; a crash is the process's own. Fewer than `--min-inputs` inputs run is a failure too (an
// empty corpus folder must not pass).
// A crash or a kill ends the process without that line: --verbose names each input before it runs,
// and --write M FILE writes mutant M (of --seed) to FILE, to add to the corpus as a regression.
// Every 100,000 mutants a line on stderr says how many have run.
//   fuzz-NAME CORPUS_DIR [--mutants N] [--seed S] [--min-inputs K] [--verbose 1] [--write M FILE]
// Bad arguments (a folder that is not one, a count that is not decimal): exit 2 naming them.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTokens = {std::string(200, '['),
                                          std::string(200, '{'),
                                          "&a [*a]",
                                          "*a",
                                          "\n---\n",
                                          "9223372036854775807",
                                          "-1",
                                          "0",
                                          "1e308",
                                          "NaN",
                                          "\"\\u0000\"",
                                          "\xff\xfe",
                                          "\x1b[2J",
                                          "\n--8<--\n",
                                          "null",
                                          "[]",
                                          "{}",
                                          "\"\":",
                                          "2147483648",
                                          "1099511627777"};

std::string mutate(const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  std::string s = corpus[pick(corpus.size())];
  const int edits = 1 + static_cast<int>(pick(4));
  for (int e = 0; e < edits; ++e) {
    const size_t at = pick(s.size() + 1);
    switch (pick(6)) {
      case 0:  // flip a bit
        if (!s.empty()) s[std::min(at, s.size() - 1)] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:  // cut a span
        s.erase(at, pick(s.size() - at + 1));
        break;
      case 2:  // repeat a span
        s.insert(at, s.substr(at, pick(64)));
        break;
      case 3:  // a token a parser has to bound
        s.insert(at, kTokens[pick(kTokens.size())]);
        break;
      case 4: {  // splice another input's tail
        const std::string& other = corpus[pick(corpus.size())];
        s = s.substr(0, at) + other.substr(pick(other.size() + 1));
        break;
      }
      default:  // a digit made large
        if (const size_t d = s.find_first_of("0123456789", at); d != std::string::npos) s.insert(d, "99999999");
    }
  }
  return s;
}

bool g_verbose = false;
constexpr int64_t kProgressEvery = 100'000;

bool run_one(const std::string& input, const std::string& origin) {
  if (g_verbose) std::fprintf(stderr, "running %s (%zu bytes)\n", origin.c_str(), input.size());
  try {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finding: %s threw %s\n", origin.c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "finding: %s threw a non-standard exception\n", origin.c_str());
  }
  return false;
}

// A decimal count in [0, 2^63), or -1.
int64_t count_of(const char* text) {
  int64_t value = 0;
  if (*text == '\0') return -1;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9' || value > (INT64_MAX - (*c - '0')) / 10) return -1;
    value = value * 10 + (*c - '0');
  }
  return value;
}

int refuse(const char* program, const std::string& what) {
  std::fprintf(stderr,
               "%s: %s: expected CORPUS_DIR (a folder) [--mutants N] [--seed S] [--min-inputs K] "
               "[--verbose 0|1] [--write M FILE], counts decimal\n",
               fs::path(program).filename().c_str(), what.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [--mutants N] [--seed S] [--min-inputs K]\n", argv[0]);
    return 2;
  }
  int64_t mutants = 0, min_inputs = 1, write_mutant = -1;
  std::string write_path;
  uint64_t seed = 0;
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    const bool known =
        flag == "--write" || flag == "--mutants" || flag == "--seed" || flag == "--min-inputs" || flag == "--verbose";
    if (!known || i + 1 >= argc || (flag == "--write" && i + 2 >= argc)) return refuse(argv[0], "flag " + flag);
    const auto number = count_of(argv[i + 1]);
    if (number < 0 && flag != "--verbose") return refuse(argv[0], flag + " " + argv[i + 1]);
    if (flag == "--write") {
      write_mutant = number;
      write_path = argv[i + 2];
      ++i;
    }
    if (flag == "--mutants") mutants = number;
    if (flag == "--seed") seed = static_cast<uint64_t>(number);
    if (flag == "--min-inputs") min_inputs = number;
    if (flag == "--verbose") g_verbose = std::strcmp(argv[i + 1], "0") != 0;
  }
  std::error_code error;
  if (!fs::is_directory(argv[1], error)) return refuse(argv[0], std::string("corpus folder ") + argv[1]);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(argv[1])) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> corpus;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    corpus.push_back(text.str());
  }
  if (write_mutant >= 0) {
    std::mt19937_64 rng(seed);
    std::string input;
    for (int64_t m = 0; m <= write_mutant && !corpus.empty(); ++m) input = mutate(corpus, rng);
    std::ofstream(write_path, std::ios::binary) << input;
    return 0;
  }
  int64_t ran = 0, findings = 0;
  for (size_t i = 0; i < corpus.size(); ++i, ++ran) findings += run_one(corpus[i], files[i].string()) ? 0 : 1;
  std::mt19937_64 rng(seed);
  for (int64_t m = 0; m < mutants && !corpus.empty(); ++m, ++ran) {
    findings +=
        run_one(mutate(corpus, rng), "mutant " + std::to_string(m) + " of seed " + std::to_string(seed)) ? 0 : 1;
    // A long run that is stopped still says how far it got.
    if ((m + 1) % kProgressEvery == 0 && m + 1 < mutants) {
      std::fprintf(stderr, "%s: %lld of %lld mutants, %lld findings\n", fs::path(argv[0]).filename().c_str(),
                   static_cast<long long>(m + 1), static_cast<long long>(mutants), static_cast<long long>(findings));
    }
  }
  std::printf("%s: %lld inputs (%zu corpus, %lld mutants), %lld findings\n", fs::path(argv[0]).filename().c_str(),
              static_cast<long long>(ran), corpus.size(),
              static_cast<long long>(ran - static_cast<int64_t>(corpus.size())), static_cast<long long>(findings));
  if (ran < min_inputs) {
    std::fprintf(stderr, "expected at least %lld inputs, ran %lld\n", static_cast<long long>(min_inputs),
                 static_cast<long long>(ran));
    return 1;
  }
  return findings == 0 ? 0 : 1;
}
