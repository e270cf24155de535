// The memory the process may use, and the default in-flight byte budget
// derived from it (ropeserve --max_inflight_bytes; docs/operations.md
// "Memory").
//
// No gRPC: unit-tested over a fake cgroup tree.
#ifndef ROPE_SERVICE_MEMORY_LIMIT_H_
#define ROPE_SERVICE_MEMORY_LIMIT_H_

#include <cstdint>
#include <optional>
#include <string>

namespace rope {

struct MemoryLimit {
  int64_t bytes = 0;
  // Where it came from: "cgroup v2 /sys/fs/cgroup/x/memory.max", "cgroup v1
  // ...memory.limit_in_bytes" or "physical memory".
  std::string source;
};

// The tightest memory limit of this process's cgroup: cgroup v2's memory.max
// of its cgroup and every ancestor, else cgroup v1's memory.limit_in_bytes;
// nullopt when there is none ("max", or v1's page-rounded INT64_MAX).
// `proc_self_cgroup` is the text of /proc/self/cgroup; `cgroup_root` where
// the hierarchies are mounted (v2 at the root or at root/unified, v1's memory
// controller at root/memory).
std::optional<MemoryLimit> CgroupMemoryLimit(const std::string& proc_self_cgroup,
                                             const std::string& cgroup_root);

// This process's cgroup limit (from /proc/self/cgroup and /sys/fs/cgroup),
// else the machine's physical memory.
MemoryLimit ProcessMemoryLimit();

// Headroom kept outside the table cache and the in-flight budget for the
// process's baseline (code, threads, gRPC, allocator slack): the larger of
// 256 MiB and an eighth of the limit.
int64_t MemoryMargin(int64_t limit_bytes);

// The smallest default budget: 64 MiB (room for a few ordinary calls even
// when the limit is tight; such a limit is then too small, and said so).
inline constexpr int64_t kMinDefaultInflightBytes = int64_t{64} << 20;

// limit - table_cache_bytes - MemoryMargin(limit), at least
// kMinDefaultInflightBytes.
int64_t DefaultInflightBytes(int64_t limit_bytes, int64_t table_cache_bytes);

}  // namespace rope

#endif  // ROPE_SERVICE_MEMORY_LIMIT_H_
