#include "tests/unit/cpu_test_engine.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/backends/cpu/cpu_backend.h"

namespace rope {
namespace test {

std::unique_ptr<Engine> MakeCpuTestEngine(std::string* skip) {
  skip->clear();
  absl::StatusOr<std::unique_ptr<Backend>> backend = NewCpuBackend(2);
  if (!backend.ok()) {
    if (backend.status().code() == absl::StatusCode::kFailedPrecondition) {
      *skip = absl::StrCat("not run here: ", backend.status().message());
    } else {
      ADD_FAILURE() << "NewCpuBackend: " << backend.status();
    }
    return nullptr;
  }
  EngineLimits limits;
  limits.max_len_cap = 1u << 16;
  limits.table_cache_bytes = 64ll << 20;
  return std::make_unique<Engine>(std::move(backend).value(), limits);
}

}  // namespace test
}  // namespace rope
