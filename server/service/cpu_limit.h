// The CPUs the process may use, for the default thread counts (ropeserve
// --work_threads and --cpu_threads at 0; docs/operations.md "Threads").
//
// std::thread::hardware_concurrency() counts the machine's CPUs: in a
// Kubernetes pod with limits.cpu 2 on a 64-core node it says 64, and 64 work
// threads plus 64 backend threads sharing a quota of 2 CPUs are throttled
// by the kernel in turns (latency spikes of a whole CFS period). The count
// here is what the process can actually run: its affinity mask (cpusets,
// taskset), lowered to its cgroup's CPU quota rounded up, as nproc,
// Go's automaxprocs and the JVM's container support count.
//
// No gRPC: unit-tested over a fake cgroup tree.
#ifndef ROPE_SERVICE_CPU_LIMIT_H_
#define ROPE_SERVICE_CPU_LIMIT_H_

#include <optional>
#include <string>

namespace rope {

struct CpuLimit {
  int cpus = 1;  // >= 1
  // Where it came from, e.g. "cgroup v2 /sys/fs/cgroup/x/cpu.max 200000 100000",
  // "affinity mask" or "hardware threads".
  std::string source;
};

// The tightest CPU quota of this process's cgroup, in whole CPUs rounded up:
// cgroup v2's cpu.max ("QUOTA PERIOD"; "max" is none) of its cgroup and
// every ancestor, else cgroup v1's cpu.cfs_quota_us / cpu.cfs_period_us
// (-1 is none); nullopt without a quota. `proc_self_cgroup` is the text of
// /proc/self/cgroup; `cgroup_root` where the hierarchies are mounted (v2 at
// the root or at root/unified, v1's cpu controller at root/cpu).
std::optional<CpuLimit> CgroupCpuLimit(const std::string& proc_self_cgroup,
                                       const std::string& cgroup_root);

// The smaller of the affinity mask's CPU count (else the hardware threads)
// and this process's cgroup quota; at least 1.
CpuLimit ProcessCpuLimit();

}  // namespace rope

#endif  // ROPE_SERVICE_CPU_LIMIT_H_
