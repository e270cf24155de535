// The published config.json files of tests/fixtures/hf_configs, by model
// name, for service tests (ROPE_HF_CONFIGS_DIR is set by CMake).
#ifndef ROPE_TESTS_SERVICE_HF_FIXTURES_H_
#define ROPE_TESTS_SERVICE_HF_FIXTURES_H_

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

#ifndef ROPE_HF_CONFIGS_DIR
#error "ROPE_HF_CONFIGS_DIR must name tests/fixtures/hf_configs"
#endif

namespace rope {
namespace test {

// The text of tests/fixtures/hf_configs/<name>.json (a test failure if absent).
inline std::string HfConfigFixture(const std::string& name) {
  std::ifstream in(std::string(ROPE_HF_CONFIGS_DIR) + "/" + name + ".json");
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_SERVICE_HF_FIXTURES_H_
