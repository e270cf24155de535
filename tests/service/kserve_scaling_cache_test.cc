// RopeScalingCache (server/kserve/kserve_scaling_cache.h) alone, and through
// PlanModelInfer with a built-in model's rope_scaling parameter: hits, keys,
// the bound and its eviction, and that a failed conversion is never cached.
#include "server/kserve/kserve_scaling_cache.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.pb.h"
#include "server/kserve/kserve_infer.h"
#include "server/kserve/kserve_models.h"

namespace rope {
namespace kserve {
namespace {

// A converter that counts its calls and gives a config naming its call.
struct CountingConverter {
  int calls = 0;
  bool fail = false;
  RopeScalingCache::Converter Get() {
    return [this]() -> absl::StatusOr<v1::RopeConfig> {
      ++calls;
      if (fail) return absl::InvalidArgumentError("parameter 'rope_scaling': bad");
      v1::RopeConfig config;
      config.mutable_linear()->set_factor(calls);
      return config;
    };
  }
};

TEST(RopeScalingCacheTest, SameKeyConvertsOnce) {
  RopeScalingCache cache;
  CountingConverter converter;
  auto first = cache.Get(R"({"rope_type": "linear", "factor": 2})", 10000, 128, converter.Get());
  auto second = cache.Get(R"({"rope_type": "linear", "factor": 2})", 10000, 128, converter.Get());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(converter.calls, 1);
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ((*second)->linear().factor(), 1);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().entries, 1);
}

TEST(RopeScalingCacheTest, TextThetaAndHeadDimAreAllTheKey) {
  RopeScalingCache cache;
  CountingConverter converter;
  const std::string text = R"({"rope_type": "linear", "factor": 2})";
  ASSERT_TRUE(cache.Get(text, 10000, 128, converter.Get()).ok());
  ASSERT_TRUE(cache.Get(text, 500000, 128, converter.Get()).ok());
  ASSERT_TRUE(cache.Get(text, 10000, 64, converter.Get()).ok());
  ASSERT_TRUE(cache.Get(text + " ", 10000, 128, converter.Get()).ok());
  EXPECT_EQ(converter.calls, 4);
  EXPECT_EQ(cache.stats().entries, 4);
  EXPECT_EQ(cache.stats().hits, 0);
}

TEST(RopeScalingCacheTest, FailedConversionIsNeverCached) {
  RopeScalingCache cache;
  CountingConverter converter;
  converter.fail = true;
  for (int i = 0; i < 3; ++i) {
    auto result = cache.Get(R"({"rope_type": "linear"})", 10000, 128, converter.Get());
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find("rope_scaling"), std::string::npos);
  }
  EXPECT_EQ(converter.calls, 3);
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.stats().bytes, 0);
}

TEST(RopeScalingCacheTest, BoundedLeastRecentlyUsedOut) {
  const int64_t entry = 10 + RopeScalingCache::kEntryOverheadBytes;  // texts of 10 bytes
  RopeScalingCache cache(3 * entry);
  CountingConverter converter;
  for (const char* text : {"text-0000a", "text-0000b", "text-0000c"}) {
    ASSERT_TRUE(cache.Get(text, 10000, 128, converter.Get()).ok());
  }
  ASSERT_TRUE(cache.Get("text-0000a", 10000, 128, converter.Get()).ok());  // a most recent
  EXPECT_EQ(converter.calls, 3);
  ASSERT_TRUE(cache.Get("text-0000d", 10000, 128, converter.Get()).ok());  // evicts b
  EXPECT_EQ(converter.calls, 4);
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_LE(cache.stats().bytes, 3 * entry);
  EXPECT_EQ(cache.stats().evictions, 1);
  ASSERT_TRUE(cache.Get("text-0000a", 10000, 128, converter.Get()).ok());  // still cached
  EXPECT_EQ(converter.calls, 4);
  ASSERT_TRUE(cache.Get("text-0000b", 10000, 128, converter.Get()).ok());  // converted again
  EXPECT_EQ(converter.calls, 5);
  EXPECT_EQ(cache.stats().entries, 3);
}

TEST(RopeScalingCacheTest, LongTextIsConvertedEveryTime) {
  RopeScalingCache cache;
  CountingConverter converter;
  const std::string text(RopeScalingCache::kMaxCachedTextBytes + 1, ' ');
  ASSERT_TRUE(cache.Get(text, 10000, 128, converter.Get()).ok());
  ASSERT_TRUE(cache.Get(text, 10000, 128, converter.Get()).ok());
  EXPECT_EQ(converter.calls, 2);
  EXPECT_EQ(cache.stats().entries, 0);
}

TEST(RopeScalingCacheTest, BudgetBelowOneEntryConvertsEveryTime) {
  RopeScalingCache cache(/*budget_bytes=*/16);
  CountingConverter converter;
  ASSERT_TRUE(cache.Get("text", 10000, 128, converter.Get()).ok());
  ASSERT_TRUE(cache.Get("text", 10000, 128, converter.Get()).ok());
  EXPECT_EQ(converter.calls, 2);
  EXPECT_EQ(cache.stats().entries, 0);
}

// A decode-size ModelInfer to the built-in rotate model with `parameters`.
inference::ModelInferRequest RotateRequestWith(const std::string& rope_scaling) {
  inference::ModelInferRequest request;
  request.set_model_name(kRotateModel);
  auto& parameters = *request.mutable_parameters();
  parameters["theta"].set_string_param("500000");
  parameters["head_dim"].set_int64_param(128);
  parameters["max_len"].set_int64_param(8192);
  parameters["rope_scaling"].set_string_param(rope_scaling);
  auto* q = request.add_inputs();
  q->set_name("q");
  q->set_datatype("FP32");
  for (int64_t d : {1, 1, 4, 128}) q->add_shape(d);
  request.add_raw_input_contents(std::string(4 * 128 * 4, '\0'));
  return request;
}

TEST(RopeScalingCacheTest, ModelInferReusesTheConversionAndNeverCachesARefusal) {
  const ModelRepository models;
  const Model& rotate = **models.Find(kRotateModel, "");
  ASSERT_NE(rotate.scaling_cache, nullptr);
  const std::string llama3 =
      R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, )"
      R"("high_freq_factor": 4.0, "original_max_position_embeddings": 8192})";

  inference::ModelInferRequest first_request = RotateRequestWith(llama3);
  auto first = PlanModelInfer(rotate, &first_request, int64_t{1} << 20);
  ASSERT_TRUE(first.ok()) << first.status();
  inference::ModelInferRequest second_request = RotateRequestWith(llama3);
  auto second = PlanModelInfer(rotate, &second_request, int64_t{1} << 20);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(rotate.scaling_cache->stats().misses, 1);
  EXPECT_EQ(rotate.scaling_cache->stats().hits, 1);
  EXPECT_TRUE(first->rotate.config().has_llama3());
  EXPECT_EQ(first->rotate.config().SerializeAsString(),
            second->rotate.config().SerializeAsString());

  // A repository-style model without the cache converts the same bits.
  Model uncached = rotate;
  uncached.scaling_cache = nullptr;
  inference::ModelInferRequest third_request = RotateRequestWith(llama3);
  auto third = PlanModelInfer(uncached, &third_request, int64_t{1} << 20);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(first->rotate.config().SerializeAsString(),
            third->rotate.config().SerializeAsString());

  const int64_t entries = rotate.scaling_cache->stats().entries;
  for (int i = 0; i < 2; ++i) {
    inference::ModelInferRequest bad = RotateRequestWith(R"({"rope_type": "llama3"})");
    auto refused = PlanModelInfer(rotate, &bad, int64_t{1} << 20);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("parameter 'rope_scaling'"), std::string::npos)
        << refused.status();
  }
  EXPECT_EQ(rotate.scaling_cache->stats().entries, entries);
  EXPECT_EQ(rotate.scaling_cache->stats().misses, 3);
}

}  // namespace
}  // namespace kserve
}  // namespace rope
