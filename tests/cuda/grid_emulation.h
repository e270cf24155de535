// Runs a kernel body on the host for every (block, thread) of a launch grid,
// one thread after another. Valid for bodies whose threads never read what
// another thread of the same launch writes (the rotate and copy kernels);
// the softmax kernel's barriers are emulated phase by phase in its test.
#ifndef ROPE_TESTS_CUDA_GRID_EMULATION_H_
#define ROPE_TESTS_CUDA_GRID_EMULATION_H_

#include <cstdint>

namespace rope {
namespace test {

// body(block, thread, block_dim, grid_dim) for every block < grid_dim and
// thread < block_dim.
template <typename Body>
void RunGridOnHost(int64_t grid_dim, int block_dim, const Body& body) {
  for (int64_t block = 0; block < grid_dim; ++block) {
    for (int thread = 0; thread < block_dim; ++thread) body(block, thread, block_dim, grid_dim);
  }
}

}  // namespace test
}  // namespace rope

#endif  // ROPE_TESTS_CUDA_GRID_EMULATION_H_
