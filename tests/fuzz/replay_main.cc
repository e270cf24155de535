// Runs LLVMFuzzerTestOneInput over every regular file under the directories
// (or files) named on the command line, so that the seed corpus and every
// kept crash input run in each ctest, with any compiler, without libFuzzer.
//
// Exit status: 0 when every input ran (a crash or sanitizer report ends the
// process); 2 when an argument cannot be read or no input was found at all,
// so that a moved corpus fails the test instead of passing vacuously.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "tests/fuzz/request_fuzz_target.h"

namespace {

namespace fs = std::filesystem;

bool ReadFile(const fs::path& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// Regular files under `root` (itself, when it is a file), sorted so that runs
// are reproducible. README files document the directories and are skipped.
bool CollectInputs(const fs::path& root, std::vector<fs::path>* inputs) {
  std::error_code error;
  if (fs::is_regular_file(root, error)) {
    inputs->push_back(root);
    return true;
  }
  if (!fs::is_directory(root, error)) return false;
  std::vector<fs::path> found;
  for (fs::recursive_directory_iterator it(root, error), end; !error && it != end;
       it.increment(error)) {
    if (!it->is_regular_file()) continue;
    const std::string name = it->path().filename().string();
    if (name.rfind("README", 0) == 0 || name == ".gitkeep") continue;
    found.push_back(it->path());
  }
  if (error) return false;
  std::sort(found.begin(), found.end());
  inputs->insert(inputs->end(), found.begin(), found.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!CollectInputs(argv[i], &inputs)) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "no inputs found\n");
    return 2;
  }
  std::string bytes;
  for (const fs::path& path : inputs) {
    if (!ReadFile(path, &bytes)) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return 2;
    }
    std::fprintf(stderr, "running %s (%zu bytes)\n", path.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  return 0;
}
