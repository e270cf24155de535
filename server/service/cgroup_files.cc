#include "server/service/cgroup_files.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace rope {

CgroupPaths ParseProcSelfCgroup(const std::string& proc_self_cgroup,
                                const std::string& v1_controller) {
  CgroupPaths paths;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) paths.v2 = parts[2];
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller == v1_controller) paths.v1 = parts[2];
    }
  }
  return paths;
}

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

std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> V2Mounts(const std::string& cgroup_root) {
  return {cgroup_root, absl::StrCat(cgroup_root, "/unified")};
}

}  // namespace rope
