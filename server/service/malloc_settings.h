// How ropeserve sets glibc's malloc up at start (docs/operations.md "Memory
// allocator"), and why.
//
// - Arenas: glibc gives threads that contend their own arenas, up to 8 per
//   core. Tensor buffers of many sizes freed into many arenas seldom go back
//   to the system, so resident memory crept under mixed load
//   (bench/results/soak_*.md: +8.9% over nine minutes with glibc's default,
//   +2.7% and the same throughput with 2 arenas). Capped at a quarter of the
//   CPUs, between 2 and 8.
// - Large buffers: a call's request and reply bytes are a few buffers of the
//   message's size (gRPC's receive slices, the parsed tensors, the reply).
//   With glibc's defaults one of a few MiB is mmap'ed, or handed back to the
//   kernel by trimming as soon as it is freed, so every call zero-fills its
//   buffers' pages afresh: a Rotate of 4 MiB spent about a fifth of its time
//   in page faults (bench/results/server_malloc.md). Buffers up to 32 MiB
//   come from the heap instead (M_MMAP_THRESHOLD), and up to 64 MiB free at
//   the top of an arena stays there for the next call (M_TRIM_THRESHOLD).
//   What an arena keeps is memory that calls in flight used a moment before,
//   so peak memory stays within the in-flight budget's bound; idle, the
//   process holds at most 64 MiB per arena above what is live.
//
// An operator's own choice wins: glibc's environment variables
// (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) or
// GLIBC_TUNABLES naming the same settings leave that setting to glibc.
//
// No gRPC: the choice is unit-tested with a fake environment.
#ifndef ROPE_SERVICE_MALLOC_SETTINGS_H_
#define ROPE_SERVICE_MALLOC_SETTINGS_H_

#include <cstdint>
#include <functional>
#include <string>

namespace rope {

inline constexpr int64_t kMallocMmapThresholdBytes = int64_t{32} << 20;
inline constexpr int64_t kMallocTrimThresholdBytes = int64_t{64} << 20;

struct MallocSettings {
  int arena_max = 0;           // 0: left to glibc
  int64_t mmap_threshold = 0;  // 0: both thresholds left to glibc
  int64_t trim_threshold = 0;
};

// Looks an environment variable up (nullptr when unset), like getenv.
using EnvLookup = std::function<const char*(const char*)>;

// The settings for a process that may use `cpus` CPUs, given its environment.
MallocSettings ChooseMallocSettings(int cpus, const EnvLookup& env);

// Applies the settings that are not left to glibc (mallopt). False when
// glibc refused one (not expected: the values are in its ranges).
bool ApplyMallocSettings(const MallocSettings& settings);

// One line for the startup log, e.g. "2 arenas; buffers up to 33554432 bytes
// from the heap, 67108864 bytes kept free per arena", naming what is left to
// glibc and why.
std::string DescribeMallocSettings(const MallocSettings& settings);

}  // namespace rope

#endif  // ROPE_SERVICE_MALLOC_SETTINGS_H_
