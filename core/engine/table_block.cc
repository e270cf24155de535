#include "core/engine/table_block.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/engine/float32_angles.h"

namespace rope {
namespace {

// Rows between exact re-evaluations of cos/sin. In between, rows advance by
// the angle-addition recurrence in double, whose error grows by a few
// ulp(double) per step: after kResyncRows steps it is ~1e-12, five orders of
// magnitude below float32 rounding (6e-8), while the exact sin/cos calls
// (slow for large angles: glibc reduces them exactly) drop to 1/kResyncRows.
constexpr int64_t kResyncRows = 1024;

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;
// Arrays at least this large get a mapping of their own; smaller ones come
// from the heap (a mapping per 1 KiB array would waste most of a page).
constexpr size_t kMapThreshold = size_t{64} << 10;

size_t RoundUp(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

// Table blocks are the server's large, long-lived allocations, and the cache
// budget counts their exact bytes, so their storage occupies no more than
// that (plus under a page) and goes back to the system when a block is
// evicted. A block's cos and sin values are one allocation (TableBlock):
//   - of at least kMapThreshold bytes, a private mapping of its size rounded
//     up to 4 KiB pages, unmapped with the block. From kHugePage up it starts
//     on a 2 MiB boundary with MADV_HUGEPAGE: a 4096-row block at rotary_dim
//     128 (2 MiB) is then one huge page, built with one page fault instead of
//     512 on 4 KiB pages. A fault costs under a microsecond on bare metal but
//     about 14 us on the Firecracker VMs measured here, where a 64 MiB table
//     took 209 ms to build on 4 KiB pages and 10.6 ms on huge pages
//     (bench/results/table_block_storage.md).
//     It is not rounded up to whole huge pages: with transparent huge pages
//     on, touching a 2 MiB-aligned block makes all of it resident, so a
//     64 KiB array would cost 2 MiB. Nor is it on the heap, where blocks
//     outliving the request buffers around them keep freed memory from going
//     back (the resident size then grows far past the budget under table
//     churn: bench/results/soak.md);
//   - smaller, from aligned_alloc (64-byte aligned).
TableBlock::Storage TableBlock::AllocateStorage(size_t count) {
  const size_t bytes = std::max<size_t>(count * sizeof(float), sizeof(float));
  if (bytes < kMapThreshold) {
    void* p = std::aligned_alloc(64, RoundUp(bytes, 64));
    if (p == nullptr) throw std::bad_alloc();
    return Storage(static_cast<float*>(p), StorageFree{0});
  }
  const size_t length = RoundUp(bytes, kPage);
  const size_t slack = length >= kHugePage ? kHugePage : 0;  // room to align the start
  void* mapped =
      mmap(nullptr, length + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  char* start = static_cast<char*>(mapped);
  if (slack > 0) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(mapped);
    char* aligned = start + (RoundUp(base, kHugePage) - base);
    // Give back the unaligned head and the unused tail of the slack.
    if (aligned > start) munmap(start, static_cast<size_t>(aligned - start));
    char* end = aligned + length;
    char* mapped_end = start + length + slack;
    if (mapped_end > end) munmap(end, static_cast<size_t>(mapped_end - end));
    start = aligned;
    madvise(start, length, MADV_HUGEPAGE);  // a hint; failure is harmless
  }
  return Storage(reinterpret_cast<float*>(start), StorageFree{length});
}

void TableBlock::StorageFree::operator()(float* p) const {
  if (mapped_bytes > 0) {
    munmap(p, mapped_bytes);
  } else {
    std::free(p);
  }
}

std::vector<double> ComputeInvFreq(const TableKey& key) {
  if (key.float32_angles) {
    const std::vector<float> inv = TransformersFloat32InvFreq(key);
    return std::vector<double>(inv.begin(), inv.end());
  }
  return ScaledInvFreq(key.scaling, key.theta, key.rotary_dim, key.long_factor);
}

double ComputeAttentionFactor(const TableKey& key) {
  return ScaledAttentionFactor(key.scaling, key.max_len);
}

void FillTableRows(const std::vector<double>& inv_freq, double factor, int64_t first_pos,
                   int64_t count, float* cos_out, float* sin_out) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  if (half == 0 || count <= 0) return;
  // One-step rotation per frequency, and the running cos/sin of the current row.
  std::vector<double> step_cos(half), step_sin(half), c(half), s(half);
  for (int64_t i = 0; i < half; ++i) {
    step_cos[i] = std::cos(inv_freq[i]);
    step_sin[i] = std::sin(inv_freq[i]);
  }
  for (int64_t row = 0; row < count; ++row) {
    float* cos_row = cos_out + row * half;
    float* sin_row = sin_out + row * half;
    if (row % kResyncRows == 0) {
      const double pos = static_cast<double>(first_pos + row);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[i];
        c[i] = std::cos(angle);
        s[i] = std::sin(angle);
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const double next_c = c[i] * step_cos[i] - s[i] * step_sin[i];
        const double next_s = s[i] * step_cos[i] + c[i] * step_sin[i];
        c[i] = next_c;
        s[i] = next_s;
      }
    }
    for (int64_t i = 0; i < half; ++i) {
      cos_row[i] = static_cast<float>(factor * c[i]);
      sin_row[i] = static_cast<float>(factor * s[i]);
    }
  }
}

int TableBlockShift(const TableKey& key) {
  int shift = 0;
  while (shift < kMaxTableBlockShift && (int64_t{1} << shift) < static_cast<int64_t>(key.max_len)) {
    ++shift;
  }
  return shift;
}

int64_t TableBlockCount(const TableKey& key) {
  const int shift = TableBlockShift(key);
  return (static_cast<int64_t>(key.max_len) + (int64_t{1} << shift) - 1) >> shift;
}

int64_t TableBlockRows(const TableKey& key, int64_t block) {
  const int shift = TableBlockShift(key);
  const int64_t first = block << shift;
  return std::min(int64_t{1} << shift, static_cast<int64_t>(key.max_len) - first);
}

int64_t TableBlockBytes(const TableKey& key, int64_t block) {
  return TableBlockRows(key, block) * (key.rotary_dim / 2) * 2 *
         static_cast<int64_t>(sizeof(float));
}

int64_t TableBytes(const TableKey& key) {
  return static_cast<int64_t>(key.max_len) * (key.rotary_dim / 2) * 2 *
         static_cast<int64_t>(sizeof(float));
}

std::string TableBlockKey::DebugString() const {
  const int shift = TableBlockShift(table);
  const int64_t first = block << shift;
  return absl::StrCat(table.DebugString(), " rows [", first, ", ",
                      first + TableBlockRows(table, block), ")");
}

TableBlock::TableBlock(int64_t first_row, int64_t rows, int half)
    : first_row_(first_row),
      rows_(rows),
      half_(half),
      sin_offset_(RoundUp(static_cast<size_t>(rows * half), 64 / sizeof(float))),
      values_(AllocateStorage(sin_offset_ + static_cast<size_t>(rows * half))) {}

std::shared_ptr<TableBlock> TableBlock::Allocate(int64_t first_row, int64_t rows, int half) {
  return std::shared_ptr<TableBlock>(new TableBlock(first_row, rows, half));
}

std::shared_ptr<const TableBlock> TableBlock::Build(const TableKey& key, int64_t block,
                                                    const ParallelFill& parallel_fill) {
  const int64_t first = block << TableBlockShift(key);
  const int half = static_cast<int>(key.rotary_dim / 2);
  // Uninitialised: every element is written by the fill below.
  std::shared_ptr<TableBlock> built = Allocate(first, TableBlockRows(key, block), half);
  const std::vector<double> inv_freq = ComputeInvFreq(key);
  const double factor = ComputeAttentionFactor(key);
  TableBlock* b = built.get();
  // FillTableRows re-anchors the recurrence at the first row of each range
  // it is given, so every block (and every piece of a parallel fill) starts
  // from exact cos/sin: the precision contract holds at any position.
  // float32 angles (float32_angles.h): the scalings allowed have factor 1.
  const std::vector<float> inv_freq_f32 =
      key.float32_angles ? TransformersFloat32InvFreq(key) : std::vector<float>();
  auto fill = [b, &inv_freq, &inv_freq_f32, factor, first, half](int64_t begin, int64_t end) {
    if (!inv_freq_f32.empty()) {
      FillFloat32AngleRows(inv_freq_f32, first + begin, end - begin,
                           b->mutable_cos() + begin * half, b->mutable_sin() + begin * half);
      return;
    }
    FillTableRows(inv_freq, factor, first + begin, end - begin, b->mutable_cos() + begin * half,
                  b->mutable_sin() + begin * half);
  };
  if (parallel_fill) {
    parallel_fill(b->rows_, fill);
  } else {
    fill(0, b->rows_);
  }
  return built;
}

}  // namespace rope
