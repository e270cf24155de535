#include "server/service/open_file_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace rope {
namespace {

// fs.nr_open: the most any process may open, and so the ceiling of a soft
// limit when the hard limit is RLIM_INFINITY. 1048576 is the kernel default.
uint64_t NrOpen() {
  std::ifstream in("/proc/sys/fs/nr_open");
  uint64_t value = 0;
  if (in >> value && value > 0) return value;
  return 1048576;
}

}  // namespace

OpenFileLimit RaiseOpenFileLimit() {
  OpenFileLimit out;
  rlimit limit = {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    out.error = absl::StrCat("getrlimit: ", std::strerror(errno));
    return out;
  }
  out.soft_before = out.soft = limit.rlim_cur;
  out.hard = limit.rlim_max;
  const uint64_t target = limit.rlim_max == RLIM_INFINITY ? NrOpen() : limit.rlim_max;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= target) return out;
  if (limit.rlim_cur == RLIM_INFINITY) return out;
  limit.rlim_cur = target;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    out.error = absl::StrCat("setrlimit: ", std::strerror(errno));
    return out;
  }
  out.soft = target;
  return out;
}

std::string DescribeOpenFileLimit(const OpenFileLimit& limit) {
  const std::string hard =
      limit.hard == RLIM_INFINITY ? "unlimited" : absl::StrCat(limit.hard);
  if (!limit.error.empty()) {
    return absl::StrCat("open files: soft limit ", limit.soft, " kept (hard limit ", hard,
                        "): raising it failed: ", limit.error);
  }
  if (limit.soft != limit.soft_before) {
    return absl::StrCat("open files: soft limit ", limit.soft_before, " raised to ", limit.soft,
                        limit.hard == RLIM_INFINITY ? " (fs.nr_open; the hard limit is unlimited)"
                                                    : " (the hard limit)");
  }
  return absl::StrCat("open files: soft limit ", limit.soft, " (the hard limit is ", hard, ")");
}

}  // namespace rope
