// What the config forms cost on the Rotate path (CPU backend,
// one thread, tables warm): the explicit fields, the same model's
// config.json (hf_config_json: a content-cache lookup and a config copy per
// call), explicit positions, and M-RoPE with three equal rows (a per-request
// gathered table). Each iteration also copies the request's bytes with
// memcpy, timed apart, so the ratio survives a shared machine's noise.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backends/cpu/cpu_backend.h"
#include "core/engine/engine.h"

namespace rope {
namespace {

// meta-llama/Llama-3.1-8B-Instruct's config.json (tests/fixtures/hf_configs).
constexpr char kLlama31Json[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3", "use_cache": true, "vocab_size": 128256})";

enum Form { kExplicit = 0, kHfConfigJson = 1, kExplicitPositions = 2, kMropeEqualRows = 3 };

std::vector<uint8_t> RandomBf16(int64_t elements, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint16_t> bits(0x3c00, 0x3fff);  // ~[0.0078, 2)
  std::vector<uint8_t> out(elements * 2);
  for (int64_t i = 0; i < elements; ++i) {
    const uint16_t v = bits(rng);
    std::memcpy(out.data() + 2 * i, &v, 2);
  }
  return out;
}

// Args: form, batch, seq, query heads (key heads: a quarter, at least 1).
void BM_RotateConfigForm(benchmark::State& state) {
  const auto form = static_cast<Form>(state.range(0));
  const int64_t b = state.range(1), s = state.range(2), hq = state.range(3);
  const int64_t hk = hq >= 4 ? hq / 4 : 1, d = 128;
  auto backend = NewCpuBackend(1);
  if (!backend.ok()) {
    state.SkipWithError("no CPU backend");
    return;
  }
  Engine engine(*std::move(backend), EngineLimits());
  std::vector<uint8_t> q = RandomBf16(b * s * hq * d, 1), k = RandomBf16(b * s * hk * d, 2);
  RotateParams p;
  p.config.max_len = 8192;
  p.config.layout = Layout::kHalf;
  if (form == kHfConfigJson) {
    p.config.hf_config_json = kLlama31Json;
  } else {
    p.config.theta = 500000;
    p.config.head_dim = 128;
    p.config.scaling = Llama3Scaling{8, 1, 4, 8192};
  }
  if (form == kMropeEqualRows) p.config.mrope.section = {16, 24, 24};
  p.q = TensorView{DType::kBFloat16, {b, s, hq, d}, q.data(), q.size()};
  p.k = TensorView{DType::kBFloat16, {b, s, hk, d}, k.data(), k.size()};
  std::vector<int64_t> tokens(b * s);
  for (int64_t i = 0; i < b * s; ++i) tokens[i] = 4000 + i % 97;
  if (form == kExplicitPositions) p.positions = tokens;
  if (form == kMropeEqualRows) {
    for (int axis = 0; axis < 3; ++axis) p.positions.insert(p.positions.end(), tokens.begin(), tokens.end());
  }
  if (form == kExplicit || form == kHfConfigJson) p.start_pos = 4000;
  if (!engine.Rotate(p).ok()) {  // warms the table and config caches
    state.SkipWithError("rotate failed");
    return;
  }
  const size_t bytes = q.size() + k.size();
  std::vector<uint8_t> copy_src(bytes, 1), copy_dst(bytes, 2);
  double rotate_seconds = 0, memcpy_seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(engine.Rotate(p));
    benchmark::ClobberMemory();
    const auto t1 = std::chrono::steady_clock::now();
    std::memcpy(copy_dst.data(), copy_src.data(), bytes);
    benchmark::DoNotOptimize(copy_dst.data());
    benchmark::ClobberMemory();
    const auto t2 = std::chrono::steady_clock::now();
    const double r = std::chrono::duration<double>(t1 - t0).count();
    rotate_seconds += r;
    memcpy_seconds += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(r);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["vs_memcpy"] = memcpy_seconds / rotate_seconds;
  state.counters["config_parses"] = static_cast<double>(engine.hf_config_cache_stats().misses);
}

// One token of one head: what each form adds per call, the rotation itself
// being negligible; then a decode batch and a short prefill of Llama 3.1 8B
// (32 query, 8 key heads).
BENCHMARK(BM_RotateConfigForm)
    ->ArgNames({"form", "B", "S", "Hq"})
    ->Args({kExplicit, 1, 1, 1})
    ->Args({kHfConfigJson, 1, 1, 1})
    ->Args({kExplicitPositions, 1, 1, 1})
    ->Args({kMropeEqualRows, 1, 1, 1})
    ->Args({kExplicit, 32, 1, 32})
    ->Args({kHfConfigJson, 32, 1, 32})
    ->Args({kExplicitPositions, 32, 1, 32})
    ->Args({kMropeEqualRows, 32, 1, 32})
    ->Args({kExplicit, 1, 512, 32})
    ->Args({kHfConfigJson, 1, 512, 32})
    ->Args({kExplicitPositions, 1, 512, 32})
    ->Args({kMropeEqualRows, 1, 512, 32})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();

}  // namespace
}  // namespace rope

BENCHMARK_MAIN();
