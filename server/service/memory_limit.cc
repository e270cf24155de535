#include "server/service/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/service/cgroup_files.h"

namespace rope {

namespace {

// v1 reports "no limit" as INT64_MAX rounded down to a page.
constexpr int64_t kNoLimitAbove = int64_t{1} << 62;

// A limit file's value; nullopt for "max", no file, or no limit.
std::optional<int64_t> ReadLimit(const std::string& path) {
  std::optional<std::string> text = ReadWholeFile(path);
  if (!text.has_value()) return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value)) return std::nullopt;
  if (value <= 0 || value >= kNoLimitAbove) return std::nullopt;
  return value;
}

// The tightest limit named `file` in `mount` over the cgroup `path` and its
// ancestors (SelfAndAncestors).
std::optional<MemoryLimit> TightestLimit(const std::string& mount, const std::string& path,
                                         const std::string& file, const std::string& kind) {
  std::optional<MemoryLimit> best;
  for (const std::string& dir : SelfAndAncestors(path)) {
    const std::string where = absl::StrCat(mount, dir, "/", file);
    std::optional<int64_t> limit = ReadLimit(where);
    if (limit.has_value() && (!best.has_value() || *limit < best->bytes)) {
      best = MemoryLimit{*limit, absl::StrCat(kind, " ", where)};
    }
  }
  return best;
}

}  // namespace

std::optional<MemoryLimit> CgroupMemoryLimit(const std::string& proc_self_cgroup,
                                             const std::string& cgroup_root) {
  const CgroupPaths paths = ParseProcSelfCgroup(proc_self_cgroup, "memory");
  if (paths.v2.has_value()) {
    for (const std::string& mount : V2Mounts(cgroup_root)) {
      std::optional<MemoryLimit> limit = TightestLimit(mount, *paths.v2, "memory.max", "cgroup v2");
      if (limit.has_value()) return limit;
    }
  }
  if (paths.v1.has_value()) {
    return TightestLimit(absl::StrCat(cgroup_root, "/memory"), *paths.v1,
                         "memory.limit_in_bytes", "cgroup v1");
  }
  return std::nullopt;
}

MemoryLimit ProcessMemoryLimit() {
  std::optional<std::string> cgroup = ReadWholeFile("/proc/self/cgroup");
  if (cgroup.has_value()) {
    std::optional<MemoryLimit> limit = CgroupMemoryLimit(*cgroup, "/sys/fs/cgroup");
    if (limit.has_value()) return *limit;
  }
  const int64_t pages = sysconf(_SC_PHYS_PAGES);
  const int64_t page_bytes = sysconf(_SC_PAGESIZE);
  return MemoryLimit{std::max<int64_t>(pages, 0) * std::max<int64_t>(page_bytes, 0),
                     "physical memory"};
}

int64_t MemoryMargin(int64_t limit_bytes) {
  return std::max<int64_t>(int64_t{256} << 20, limit_bytes / 8);
}

int64_t DefaultInflightBytes(int64_t limit_bytes, int64_t table_cache_bytes) {
  return std::max(kMinDefaultInflightBytes,
                  limit_bytes - table_cache_bytes - MemoryMargin(limit_bytes));
}

}  // namespace rope
