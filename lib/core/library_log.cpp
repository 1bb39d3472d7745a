#include "lib/core/library_log.h"

#include <c10/util/Logging.h>

namespace magic {

#ifdef C10_USE_GLOG
LibraryLogSilenced::LibraryLogSilenced() : saved_(FLAGS_minloglevel) {
  FLAGS_minloglevel = google::GLOG_FATAL;
}
LibraryLogSilenced::~LibraryLogSilenced() {
  FLAGS_minloglevel = saved_;
}
#else
// c10's own logger drops messages below FLAGS_caffe2_log_level (3: FATAL).
LibraryLogSilenced::LibraryLogSilenced() : saved_(FLAGS_caffe2_log_level) {
  FLAGS_caffe2_log_level = 3;
}
LibraryLogSilenced::~LibraryLogSilenced() {
  FLAGS_caffe2_log_level = saved_;
}
#endif

}  // namespace magic
