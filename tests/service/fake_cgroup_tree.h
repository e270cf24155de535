// A fake cgroup mount for the cgroup readers' tests (memory_limit.h,
// cpu_limit.h): a fresh directory per test under the test temp dir, where
// Write() puts limit files at paths relative to it.
#ifndef ROPE_TESTS_SERVICE_FAKE_CGROUP_TREE_H_
#define ROPE_TESTS_SERVICE_FAKE_CGROUP_TREE_H_

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace rope {

class FakeCgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::path(::testing::TempDir()) /
            ("cgroup_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = root_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::string root() const { return root_.string(); }

 private:
  std::filesystem::path root_;
};

}  // namespace rope

#endif  // ROPE_TESTS_SERVICE_FAKE_CGROUP_TREE_H_
