#include "lib/core/error.h"

#include "lib/core/utf8.h"

namespace magic {

InputError::InputError(const std::string& message) : std::runtime_error(quoted_input(message, std::string::npos)) {}

}  // namespace magic
