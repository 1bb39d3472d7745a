#include "lib/core/process_exit.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace magic {

void exit_without_static_destructors(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);  // every C stream
  std::_Exit(code);
}

}  // namespace magic
