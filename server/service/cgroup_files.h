// Reading this process's cgroup: where it sits in each hierarchy
// (/proc/self/cgroup) and the limit files of it and its ancestors. Shared by
// memory_limit.h and cpu_limit.h.
//
// No gRPC: unit-tested over fake cgroup trees.
#ifndef ROPE_SERVICE_CGROUP_FILES_H_
#define ROPE_SERVICE_CGROUP_FILES_H_

#include <optional>
#include <string>
#include <vector>

namespace rope {

// The process's cgroup paths from the text of /proc/self/cgroup: the
// unified (v2) hierarchy's ("0::/path"), and the v1 hierarchy's that has
// `v1_controller` (e.g. "memory", "cpu"); nullopt where there is none.
struct CgroupPaths {
  std::optional<std::string> v2;
  std::optional<std::string> v1;
};
CgroupPaths ParseProcSelfCgroup(const std::string& proc_self_cgroup,
                                const std::string& v1_controller);

// "/a/b" -> {"/a/b", "/a", ""}: the cgroup and its ancestors, as suffixes of
// the mount point. Inside a container the process's own path may not exist
// under the mount (the container's cgroup is mounted as the root); the root
// ("") is then the one that counts.
std::vector<std::string> SelfAndAncestors(std::string path);

// The whole file, or nullopt when it cannot be read.
std::optional<std::string> ReadWholeFile(const std::string& path);

// Where a cgroup v2 hierarchy may be mounted under `cgroup_root`: the root
// itself (pure v2) and root/unified (hybrid).
std::vector<std::string> V2Mounts(const std::string& cgroup_root);

}  // namespace rope

#endif  // ROPE_SERVICE_CGROUP_FILES_H_
