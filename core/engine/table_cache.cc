#include "core/engine/table_cache.h"

#include <new>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rope {

TableCache::TableCache(int64_t budget_bytes, Builder builder)
    : builder_(builder ? std::move(builder) : Builder([](const TableKey& key, int64_t block) {
        return TableBlock::Build(key, block);
      })),
      budget_bytes_(budget_bytes),
      cache_(budget_bytes, "table-cache", HeldValues::kCountAgainstBudget) {}

absl::StatusOr<std::shared_ptr<const RopeTable>> TableCache::Get(const TableKey& key,
                                                                 absl::Span<const int64_t> blocks) {
  if (blocks.empty())
    return std::make_shared<const RopeTable>(key, 0,
                                             std::vector<std::shared_ptr<const TableBlock>>());
  // The call holds every block it touches at once, so together they must fit
  // the budget (one block's own check is in KeyedLruCache::Get).
  int64_t bytes = 0;
  for (int64_t b : blocks) bytes += TableBlockBytes(key, b);
  if (blocks.size() > 1 && bytes > budget_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("table for ", key.DebugString(), ": the ", blocks.size(),
                     " blocks of rows this call touches need ", bytes,
                     " bytes: over the table-cache budget of ", budget_bytes_, " bytes"));
  }
  const int64_t first = blocks.front();
  std::vector<std::shared_ptr<const TableBlock>> held(blocks.back() - first + 1);
  for (int64_t b : blocks) {
    const TableBlockKey block_key{key, b};
    const int64_t size = TableBlockBytes(key, b);
    absl::StatusOr<std::shared_ptr<const TableBlock>> block =
        cache_.Get(block_key, size, [&]() -> absl::StatusOr<std::shared_ptr<const TableBlock>> {
          try {
            return builder_(key, b);
          } catch (const std::bad_alloc&) {
            return absl::ResourceExhaustedError(absl::StrCat(
                "out of memory building ", block_key.DebugString(), " (", size, " bytes)"));
          }
        });
    if (!block.ok()) return block.status();
    held[b - first] = *std::move(block);
  }
  return std::make_shared<const RopeTable>(key, first, std::move(held));
}

absl::StatusOr<std::shared_ptr<const RopeTable>> TableCache::Get(const TableKey& key) {
  std::vector<int64_t> all(TableBlockCount(key));
  std::iota(all.begin(), all.end(), int64_t{0});
  return Get(key, all);
}

}  // namespace rope
