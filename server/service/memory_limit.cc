#include "server/service/memory_limit.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rope {

namespace {

// v1 reports "no limit" as INT64_MAX rounded down to a page.
constexpr int64_t kNoLimitAbove = int64_t{1} << 62;

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A limit file's value; nullopt for "max", no file, or no limit.
std::optional<int64_t> ReadLimit(const std::string& path) {
  std::optional<std::string> text = ReadFile(path);
  if (!text.has_value()) return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value)) return std::nullopt;
  if (value <= 0 || value >= kNoLimitAbove) return std::nullopt;
  return value;
}

// "/a/b" -> {"/a/b", "/a", ""}: the cgroup and its ancestors, as suffixes of
// the mount point.
std::vector<std::string> SelfAndAncestors(std::string path) {
  while (!path.empty() && path.back() == '/') path.pop_back();
  std::vector<std::string> out;
  while (true) {
    out.push_back(path);
    if (path.empty()) break;
    path = path.substr(0, path.rfind('/'));
  }
  return out;
}

// The tightest limit named `file` in `mount` over the cgroup `path` and its
// ancestors. Inside a container the process's path may not exist under the
// mount (the container's cgroup is mounted as the root): the root counts.
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
  std::optional<std::string> v2_path, v1_path;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) v2_path = parts[2];
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller == "memory") v1_path = parts[2];
    }
  }
  if (v2_path.has_value()) {
    for (const std::string& mount : {cgroup_root, absl::StrCat(cgroup_root, "/unified")}) {
      std::optional<MemoryLimit> limit = TightestLimit(mount, *v2_path, "memory.max", "cgroup v2");
      if (limit.has_value()) return limit;
    }
  }
  if (v1_path.has_value()) {
    return TightestLimit(absl::StrCat(cgroup_root, "/memory"), *v1_path,
                         "memory.limit_in_bytes", "cgroup v1");
  }
  return std::nullopt;
}

MemoryLimit ProcessMemoryLimit() {
  std::optional<std::string> cgroup = ReadFile("/proc/self/cgroup");
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
