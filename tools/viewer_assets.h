// The tracer's viewer (tools/viewer/: index.html, viewer.js, viewer.css), built into the tools
// that serve it (cmake/embed_viewer.cmake), by the path the server answers on.
#pragma once

#include <map>
#include <string>

#include "lib/live/trace_server.h"

namespace magic {

std::map<std::string, ViewerAsset> viewer_assets();

}  // namespace magic
