#include "lib/core/process_exit.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace magic {

void exit_without_static_destructors(int code, LeakCheck leaks) {
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);  // every C stream
#if defined(__SANITIZE_ADDRESS__)
  // A leak found ends the process here with LSAN_OPTIONS' exitcode (23), which no tool uses.
  if (leaks == LeakCheck::kRun) __lsan_do_leak_check();
#else
  (void)leaks;
#endif
  std::_Exit(code);
}

}  // namespace magic
