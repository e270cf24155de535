#include "server/service/cpu_limit.h"

#include <sched.h>

#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/service/cgroup_files.h"

namespace rope {
namespace {

// Whole CPUs for `quota` microseconds per `period`, rounded up (a quota of
// 1.5 CPUs can keep two threads busy part of the time); nullopt for "no
// quota" or a malformed pair.
std::optional<int> QuotaCpus(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  const int64_t cpus = (quota + period - 1) / period;
  return static_cast<int>(std::min<int64_t>(cpus, 1 << 20));
}

std::optional<int64_t> ReadInt(const std::string& path) {
  std::optional<std::string> text = ReadWholeFile(path);
  int64_t value = 0;
  if (!text.has_value() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value)) {
    return std::nullopt;
  }
  return value;
}

void KeepTighter(std::optional<int> cpus, std::string source, std::optional<CpuLimit>* best) {
  if (cpus.has_value() && (!best->has_value() || *cpus < (*best)->cpus)) {
    *best = CpuLimit{*cpus, std::move(source)};
  }
}

// cpu.max of `path` and its ancestors under a v2 mount.
std::optional<CpuLimit> TightestV2(const std::string& mount, const std::string& path) {
  std::optional<CpuLimit> best;
  for (const std::string& dir : SelfAndAncestors(path)) {
    const std::string where = absl::StrCat(mount, dir, "/cpu.max");
    std::optional<std::string> text = ReadWholeFile(where);
    if (!text.has_value()) continue;
    const std::string line(absl::StripAsciiWhitespace(*text));
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t quota = 0, period = 100000;  // the kernel's default period
    if (fields.empty() || !absl::SimpleAtoi(fields[0], &quota)) continue;  // "max": none
    if (fields.size() > 1 && !absl::SimpleAtoi(fields[1], &period)) continue;
    KeepTighter(QuotaCpus(quota, period), absl::StrCat("cgroup v2 ", where, " ", line), &best);
  }
  return best;
}

// cpu.cfs_quota_us / cpu.cfs_period_us of `path` and its ancestors.
std::optional<CpuLimit> TightestV1(const std::string& mount, const std::string& path) {
  std::optional<CpuLimit> best;
  for (const std::string& dir : SelfAndAncestors(path)) {
    const std::string where = absl::StrCat(mount, dir, "/cpu.cfs_quota_us");
    std::optional<int64_t> quota = ReadInt(where);
    std::optional<int64_t> period = ReadInt(absl::StrCat(mount, dir, "/cpu.cfs_period_us"));
    if (!quota.has_value() || !period.has_value()) continue;
    KeepTighter(QuotaCpus(*quota, *period),
                absl::StrCat("cgroup v1 ", where, " ", *quota, " / ", *period), &best);
  }
  return best;
}

}  // namespace

std::optional<CpuLimit> CgroupCpuLimit(const std::string& proc_self_cgroup,
                                       const std::string& cgroup_root) {
  const CgroupPaths paths = ParseProcSelfCgroup(proc_self_cgroup, "cpu");
  if (paths.v2.has_value()) {
    for (const std::string& mount : V2Mounts(cgroup_root)) {
      std::optional<CpuLimit> limit = TightestV2(mount, *paths.v2);
      if (limit.has_value()) return limit;
    }
  }
  if (paths.v1.has_value()) return TightestV1(absl::StrCat(cgroup_root, "/cpu"), *paths.v1);
  return std::nullopt;
}

CpuLimit ProcessCpuLimit() {
  CpuLimit limit{static_cast<int>(std::thread::hardware_concurrency()), "hardware threads"};
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    limit = CpuLimit{CPU_COUNT(&set), "affinity mask"};
  }
  std::optional<std::string> cgroup = ReadWholeFile("/proc/self/cgroup");
  if (cgroup.has_value()) {
    std::optional<CpuLimit> quota = CgroupCpuLimit(*cgroup, "/sys/fs/cgroup");
    if (quota.has_value() && quota->cpus < limit.cpus) limit = *quota;
  }
  if (limit.cpus < 1) limit = CpuLimit{1, "at least one"};
  return limit;
}

}  // namespace rope
