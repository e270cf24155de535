// The process's open-file limit (RLIMIT_NOFILE): every connection is a file
// descriptor, and the default soft limit (1024 on most distributions) is a
// few hundred connections from exhausted. A process may raise its soft limit
// up to its hard limit without privileges; ropeserve does at start and says
// so (a container runtime's hard limit is usually 524288 or 1048576).
#ifndef ROPE_SERVICE_OPEN_FILE_LIMIT_H_
#define ROPE_SERVICE_OPEN_FILE_LIMIT_H_

#include <cstdint>
#include <string>

namespace rope {

struct OpenFileLimit {
  uint64_t soft_before = 0;
  uint64_t soft = 0;  // after
  uint64_t hard = 0;
  std::string error;  // why it could not be raised; empty when it was (or needed not be)
};

// Raises RLIMIT_NOFILE's soft limit to its hard limit (an unlimited hard
// limit: to the kernel's fs.nr_open). Never lowers it.
OpenFileLimit RaiseOpenFileLimit();

// One line for the start-up log, e.g. "open files: soft limit 1024 raised to
// 524288 (the hard limit)".
std::string DescribeOpenFileLimit(const OpenFileLimit& limit);

}  // namespace rope

#endif  // ROPE_SERVICE_OPEN_FILE_LIMIT_H_
