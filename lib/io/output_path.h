// Output paths, checked before the expensive part of a run starts: by making (and at once
// removing) a probe directory where the output goes, since access() says yes to root even on
// /proc. Nothing is left here, so a run that fails later leaves nothing behind. Errors are
// InputErrors naming the flag and path.
#pragma once

#include <string>

namespace magic {

// A file to be written (a report): its directory exists and is writable, and the path is not a
// directory.
void require_writable_file(const std::string& path, const std::string& flag);

// A directory to be created or written into: an existing path is a writable directory, else its
// nearest existing ancestor is.
void require_writable_directory(const std::string& path, const std::string& flag);

}  // namespace magic
