// The fuzz entry point over request parsing, conversion, validation and the
// CPU engine, shared by the libFuzzer binary (rope_request_fuzzer), the
// corpus replay test (rope_fuzz_replay) and the seed corpus generator.
//
// Input format: byte 0 picks the RPC (value % 7: 0 RotateRequest,
// 1 AttentionScoresRequest, 2 GetTableRequest, 3 ResolveConfig's RopeConfig,
// 4 RegisterSharedMemoryRequest: host regions and CUDA IPC handles, which
// the CPU engine refuses after the request's own checks; 5
// BuildPositionsRequest; 6 the KServe v2
// inference.ModelInferRequest, converted into its rope.v1 request and run
// as the service runs it, server/kserve/kserve_infer.h, on the built-in
// models);
// the remaining bytes are that message in protobuf wire format. Every
// RopeConfig may carry hf_config_json, so the config.json parser is fuzzed
// through all four.
#ifndef ROPE_TESTS_FUZZ_REQUEST_FUZZ_TARGET_H_
#define ROPE_TESTS_FUZZ_REQUEST_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>

namespace rope {
namespace fuzz {

enum class RequestKind : uint8_t {
  kRotate = 0,
  kAttention = 1,
  kGetTable = 2,
  kResolveConfig = 3,
  kRegisterSharedMemory = 4,
  kBuildPositions = 5,
  kModelInfer = 6,
};
inline constexpr int kRequestKinds = 7;

}  // namespace fuzz
}  // namespace rope

// Runs one input through the engine. Returns 0 (libFuzzer's contract);
// aborts when a request is rejected with a catch-all code (UNKNOWN,
// INTERNAL) or an empty message, which are bugs: every rejection of client
// input must be specific and say why. With ROPE_FUZZ_VERBOSE set in the
// environment, prints each status to stderr.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

#endif  // ROPE_TESTS_FUZZ_REQUEST_FUZZ_TARGET_H_
