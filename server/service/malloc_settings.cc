#include "server/service/malloc_settings.h"

#include <malloc.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rope {
namespace {

bool IsSet(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  return value != nullptr && value[0] != '\0';
}

// GLIBC_TUNABLES is "name=value:name=value"; a setting there is the
// operator's choice as much as the older variables are.
bool TunableSet(const EnvLookup& env, const char* tunable) {
  const char* tunables = env("GLIBC_TUNABLES");
  return tunables != nullptr && absl::StrContains(tunables, absl::StrCat(tunable, "="));
}

}  // namespace

MallocSettings ChooseMallocSettings(int cpus, const EnvLookup& env) {
  MallocSettings settings;
  if (!IsSet(env, "MALLOC_ARENA_MAX") && !TunableSet(env, "glibc.malloc.arena_max")) {
    settings.arena_max = std::clamp(cpus / 4, 2, 8);
  }
  // Setting either threshold turns off glibc's adjustment of both, so an
  // operator's choice of one leaves the pair to glibc.
  const bool thresholds_chosen = IsSet(env, "MALLOC_MMAP_THRESHOLD_") ||
                                 IsSet(env, "MALLOC_TRIM_THRESHOLD_") ||
                                 TunableSet(env, "glibc.malloc.mmap_threshold") ||
                                 TunableSet(env, "glibc.malloc.trim_threshold");
  if (!thresholds_chosen) {
    settings.mmap_threshold = kMallocMmapThresholdBytes;
    settings.trim_threshold = kMallocTrimThresholdBytes;
  }
  return settings;
}

bool ApplyMallocSettings(const MallocSettings& settings) {
  bool ok = true;
  if (settings.arena_max > 0) ok &= mallopt(M_ARENA_MAX, settings.arena_max) == 1;
  if (settings.mmap_threshold > 0) {
    ok &= mallopt(M_MMAP_THRESHOLD, static_cast<int>(settings.mmap_threshold)) == 1;
    ok &= mallopt(M_TRIM_THRESHOLD, static_cast<int>(settings.trim_threshold)) == 1;
  }
  return ok;
}

std::string DescribeMallocSettings(const MallocSettings& settings) {
  std::string text = settings.arena_max > 0
                         ? absl::StrCat(settings.arena_max, " arenas")
                         : "arenas as the environment sets them (MALLOC_ARENA_MAX or GLIBC_TUNABLES)";
  if (settings.mmap_threshold > 0) {
    absl::StrAppend(&text, "; buffers up to ", settings.mmap_threshold,
                    " bytes from the heap, ", settings.trim_threshold,
                    " bytes kept free per arena");
  } else {
    absl::StrAppend(&text,
                    "; mmap and trim thresholds as the environment sets them "
                    "(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES)");
  }
  return text;
}

}  // namespace rope
