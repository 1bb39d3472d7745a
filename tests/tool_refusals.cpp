#include "tests/tool_refusals.h"

#include "tests/flag_refusal.h"
#include "tools/check_command.h"
#include "tools/run_flags.h"

namespace magic::testing {

std::string magic_check_refusal(const std::string& args) {
  return flag_refusal(
      [](int argc, char** argv) {
        int early_exit = -1;
        parse_check_command(argc, argv, early_exit);
      },
      args);
}

std::string magic_run_refusal(const std::string& args) {
  return flag_refusal(
      [](int argc, char** argv) {
        int early_exit = -1;
        parse_run_flags(argc, argv, early_exit);
      },
      args);
}

}  // namespace magic::testing
