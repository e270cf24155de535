// The engine the unit tests run on: the CPU backend with 2 threads, on the
// SIMD path the ROPE_CPU_SIMD environment variable names (ctest runs the
// rotate and attention grids once per compiled path; tests/unit/CMakeLists.txt)
// or, without it, the best path this CPU runs.
#ifndef ROPE_TESTS_UNIT_CPU_TEST_ENGINE_H_
#define ROPE_TESTS_UNIT_CPU_TEST_ENGINE_H_

#include <memory>
#include <string>

#include "core/engine/engine.h"

namespace rope {
namespace test {

// When ROPE_CPU_SIMD names a compiled path this CPU cannot run, returns null
// and sets *skip to say so (the caller skips, naming it). Any other failure
// is a test failure (ADD_FAILURE) and returns null with *skip empty.
std::unique_ptr<Engine> MakeCpuTestEngine(std::string* skip);

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_UNIT_CPU_TEST_ENGINE_H_
