#include "core/engine/qwen_rope_index.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "core/engine/bounded_json.h"

namespace rope {
namespace {

using Json = nlohmann::json;

constexpr int kAxes = 3;

enum class QwenFamily { kQwen2Vl, kQwen25Vl, kQwen3Vl };

// What get_rope_index reads from the config. Defaults are those of
// transformers' config classes (Qwen2VLConfig, Qwen2_5_VLVisionConfig,
// Qwen3VLConfig), for keys a config.json may leave out.
struct QwenTokens {
  QwenFamily family = QwenFamily::kQwen2Vl;
  int64_t image_token_id = 151655;
  int64_t video_token_id = 151656;
  int64_t vision_start_token_id = 151652;
  int64_t spatial_merge_size = 2;
  double tokens_per_second = 4;  // Qwen2_5_VLVisionConfig's default; published configs say 2
};

absl::Status ConfigError(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("hf_config_json: ", path, " ", what));
}

// An integer at `key` of `object` (path `prefix` + key), if present.
absl::StatusOr<std::optional<int64_t>> IntegerAt(const Json& object, const std::string& prefix,
                                                 const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) {
    return ConfigError(absl::StrCat(prefix, key),
                       absl::StrCat("is ", it->dump().substr(0, 64), ": must be an integer"));
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

absl::StatusOr<QwenTokens> ReadQwenTokens(const std::string& text, const Interrupt* interrupt) {
  if (text.empty()) {
    return absl::InvalidArgumentError(
        "hf_config_json is empty: the token ids and merge size come from the model's "
        "config.json (Qwen2-VL, Qwen2.5-VL or Qwen3-VL)");
  }
  ROPE_ASSIGN_OR_RETURN(const Json root, ParseConfigJson(text, interrupt));
  QwenTokens tokens;
  const auto type = root.find("model_type");
  const std::string model_type =
      type != root.end() && type->is_string() ? type->get<std::string>() : std::string();
  if (model_type == "qwen2_vl") {
    tokens.family = QwenFamily::kQwen2Vl;
  } else if (model_type == "qwen2_5_vl") {
    tokens.family = QwenFamily::kQwen25Vl;
  } else if (model_type == "qwen3_vl" || model_type == "qwen3_vl_moe") {
    tokens.family = QwenFamily::kQwen3Vl;
  } else {
    return ConfigError("model_type", absl::StrCat("is \"", model_type.substr(0, 64),
                                                  "\": positions are built for qwen2_vl, "
                                                  "qwen2_5_vl, qwen3_vl and qwen3_vl_moe"));
  }
  for (const auto& [key, field] :
       {std::pair<const char*, int64_t*>{"image_token_id", &tokens.image_token_id},
        std::pair<const char*, int64_t*>{"video_token_id", &tokens.video_token_id},
        std::pair<const char*, int64_t*>{"vision_start_token_id",
                                         &tokens.vision_start_token_id}}) {
    ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> value, IntegerAt(root, "", key));
    if (value.has_value()) *field = *value;
  }
  const auto vision = root.find("vision_config");
  if (vision != root.end() && vision->is_object()) {
    ROPE_ASSIGN_OR_RETURN(std::optional<int64_t> merge,
                          IntegerAt(*vision, "vision_config.", "spatial_merge_size"));
    if (merge.has_value()) tokens.spatial_merge_size = *merge;
    const auto tps = vision->find("tokens_per_second");
    if (tps != vision->end() && !tps->is_null()) {
      if (!tps->is_number() || !std::isfinite(tps->get<double>()) || tps->get<double>() < 0) {
        return ConfigError("vision_config.tokens_per_second",
                           absl::StrCat("is ", tps->dump().substr(0, 64),
                                        ": must be a finite number >= 0"));
      }
      tokens.tokens_per_second = tps->get<double>();
    }
  }
  if (tokens.spatial_merge_size < 1) {
    return ConfigError("vision_config.spatial_merge_size",
                       absl::StrCat("is ", tokens.spatial_merge_size, ": must be >= 1"));
  }
  return tokens;
}

struct Grid {
  int64_t t = 0, h = 0, w = 0;
};

absl::StatusOr<std::vector<Grid>> GridsOf(const std::vector<int64_t>& values, const char* field) {
  if (values.size() % 3 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " has ", values.size(), " values: must be 3 per grid (t, h, w)"));
  }
  std::vector<Grid> grids;
  for (size_t i = 0; i < values.size(); i += 3) {
    for (size_t j = i; j < i + 3; ++j) {
      if (values[j] < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, "[", j, "] is ", values[j], ": must be >= 1"));
      }
    }
    grids.push_back(Grid{values[i], values[i + 1], values[i + 2]});
  }
  return grids;
}

// The positions of one batch row's unmasked tokens, [axis][token], and the
// largest. `next_image` / `next_video` index the grids, across rows.
struct RowPositions {
  std::vector<int64_t> axis[kAxes];
  int64_t max = 0;
};

class RowBuilder {
 public:
  RowBuilder(const QwenTokens& tokens, const std::vector<Grid>& images,
             const std::vector<Grid>& videos, const std::vector<double>& seconds)
      : tokens_(tokens), images_(images), videos_(videos), seconds_(seconds) {}

  absl::StatusOr<RowPositions> Build(const std::vector<int64_t>& ids, int64_t row) {
    const int64_t n = static_cast<int64_t>(ids.size());
    int64_t image_nums = 0, video_nums = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] != tokens_.vision_start_token_id) continue;
      if (i + 1 >= n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input_ids row ", row, " ends with vision_start_token_id ",
            tokens_.vision_start_token_id, ": an image or video token must follow it"));
      }
      if (ids[i + 1] == tokens_.image_token_id) ++image_nums;
      if (ids[i + 1] == tokens_.video_token_id) ++video_nums;
    }
    const bool has_image = std::find(ids.begin(), ids.end(), tokens_.image_token_id) != ids.end();
    const bool has_video = std::find(ids.begin(), ids.end(), tokens_.video_token_id) != ids.end();
    RowPositions out;
    for (auto& a : out.axis) a.reserve(n);
    int64_t st = 0;
    // The largest position of the last block appended; none yet: -1.
    int64_t last_max = -1;
    int64_t remain_images = image_nums, remain_videos = video_nums;
    for (int64_t v = 0; v < image_nums + video_nums; ++v) {
      ROPE_ASSIGN_OR_RETURN(const int64_t ed_image,
                            NextIndex(ids, tokens_.image_token_id, st,
                                      has_image && remain_images > 0, row, "image_token_id"));
      ROPE_ASSIGN_OR_RETURN(const int64_t ed_video,
                            NextIndex(ids, tokens_.video_token_id, st,
                                      has_video && remain_videos > 0, row, "video_token_id"));
      Grid grid;
      double second_per_grid_t = 0;
      bool is_video = false;
      int64_t ed = 0;
      if (ed_image < ed_video) {
        if (next_image_ >= static_cast<int64_t>(images_.size())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input_ids has more images than image_grid_thw's ", images_.size(),
              " grids (row ", row, ", token ", ed_image, ")"));
        }
        grid = images_[next_image_++];
        --remain_images;
        ed = ed_image;
      } else {
        if (next_video_ >= static_cast<int64_t>(videos_.size())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input_ids has more videos than video_grid_thw's ", videos_.size(),
              " grids (row ", row, ", token ", ed_video, ")"));
        }
        second_per_grid_t = seconds_.empty() ? 1.0 : seconds_[next_video_];
        grid = videos_[next_video_++];
        --remain_videos;
        ed = ed_video;
        is_video = true;
      }
      const int64_t gt = grid.t, gh = grid.h / tokens_.spatial_merge_size,
                    gw = grid.w / tokens_.spatial_merge_size;
      if (gh < 1 || gw < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            is_video ? "video_grid_thw" : "image_grid_thw", " (", grid.t, ", ", grid.h, ", ",
            grid.w, ") has fewer than spatial_merge_size ", tokens_.spatial_merge_size,
            " patches in h or w"));
      }
      const int64_t text_len = ed - st;
      const int64_t st_idx = last_max + 1;
      AppendText(text_len, st_idx, &out);
      // Every vision token must lie within the row: the block ends at
      // ed + gt * gh * gw <= n.
      if (gt > n || gh > n || gw > n || gt * gh > n || gt * gh * gw > n - ed) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input_ids row ", row, ": the ", is_video ? "video" : "image", " at token ", ed,
            " has grid (", grid.t, ", ", grid.h, ", ", grid.w, "), ", gt, " x ", gh, " x ", gw,
            " tokens: past the row's ", n, " tokens"));
      }
      ROPE_ASSIGN_OR_RETURN(last_max, AppendVision(gt, gh, gw, is_video, second_per_grid_t,
                                                   text_len + st_idx, &out));
      st = ed + gt * gh * gw;
    }
    if (st < n) {
      const int64_t st_idx = last_max + 1;
      AppendText(n - st, st_idx, &out);
      last_max = st_idx + (n - st) - 1;
    }
    if (static_cast<int64_t>(out.axis[0].size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input_ids row ", row, ": the grids give ", out.axis[0].size(), " positions for its ",
          n, " tokens (the vision tokens do not match image_grid_thw / video_grid_thw)"));
    }
    out.max = last_max;
    for (const auto& a : out.axis) {
      for (int64_t p : a) out.max = std::max(out.max, p);
    }
    return out;
  }

  // transformers 5.x: the row's runs of equal token type (text, image
  // token, video token), each image or video run one grid; the text after
  // a block starts at the block's start + max(h, w) / m.
  absl::StatusOr<RowPositions> BuildTransformers5(const std::vector<int64_t>& ids, int64_t row) {
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention_mask row ", row, " masks every token: transformers 5's get_rope_index "
          "has no positions to join for a row without unmasked tokens"));
    }
    RowPositions out;
    for (auto& a : out.axis) a.reserve(n);
    int64_t current = 0;
    for (int64_t i = 0; i < n;) {
      const int type = TypeOf(ids[i]);
      int64_t j = i;
      while (j < n && TypeOf(ids[j]) == type) ++j;
      const int64_t run = j - i;
      if (type == 0) {
        AppendText(run, current, &out);
        current += run;
        i = j;
        continue;
      }
      const bool is_video = type == 2;
      const std::vector<Grid>& grids = is_video ? videos_ : images_;
      int64_t& next = is_video ? next_video_ : next_image_;
      if (next >= static_cast<int64_t>(grids.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input_ids has more ", is_video ? "videos than video_grid_thw's " : "images than "
            "image_grid_thw's ", grids.size(), " grids (row ", row, ", token ", i, ")"));
      }
      const Grid grid = grids[next];
      double interval = 1.0;
      if (is_video && tokens_.family == QwenFamily::kQwen25Vl) {
        interval = tokens_.tokens_per_second * (seconds_.empty() ? 1.0 : seconds_[next]);
      }
      ++next;
      const int64_t gt = grid.t, gh = grid.h / tokens_.spatial_merge_size,
                    gw = grid.w / tokens_.spatial_merge_size;
      const char* field = is_video ? "video_grid_thw" : "image_grid_thw";
      if (gh < 1 || gw < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, " (", grid.t, ", ", grid.h, ", ", grid.w, ") has fewer than spatial_merge_size ",
            tokens_.spatial_merge_size, " patches in h or w"));
      }
      if (gt > run || gh > run || gw > run || gt * gh > run || gt * gh * gw != run) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input_ids row ", row, ": the run of ", run, " ", is_video ? "video" : "image",
            " tokens at token ", i, " does not match its grid (", grid.t, ", ", grid.h, ", ",
            grid.w, "), ", gt, " x ", gh, " x ", gw, " tokens"));
      }
      for (int64_t k = 0; k < gt; ++k) {
        const double time = static_cast<double>(k) * interval;
        if (!(time < 9007199254740992.0)) {  // 2^53
          return absl::InvalidArgumentError(absl::StrCat(
              "video ", next - 1, "'s frame ", k, " has time index ", time,
              " (vision_config.tokens_per_second ", tokens_.tokens_per_second,
              " * second_per_grid_ts ", interval / tokens_.tokens_per_second, "): past 2^53"));
        }
        const int64_t t_position = current + static_cast<int64_t>(time);
        for (int64_t h = 0; h < gh; ++h) {
          for (int64_t w = 0; w < gw; ++w) {
            out.axis[0].push_back(t_position);
            out.axis[1].push_back(current + h);
            out.axis[2].push_back(current + w);
          }
        }
      }
      current += std::max(gh, gw);
      i = j;
    }
    out.max = 0;
    for (const auto& a : out.axis) {
      for (int64_t p : a) out.max = std::max(out.max, p);
    }
    return out;
  }

  int64_t images_used() const { return next_image_; }
  int64_t videos_used() const { return next_video_; }

 private:
  // Python's list.index(token, st) when `searched`, else len + 1;
  // INVALID_ARGUMENT where index() raises.
  static absl::StatusOr<int64_t> NextIndex(const std::vector<int64_t>& ids, int64_t token,
                                           int64_t st, bool searched, int64_t row,
                                           const char* name) {
    const int64_t n = static_cast<int64_t>(ids.size());
    if (!searched) return n + 1;
    for (int64_t i = std::min(st, n); i < n; ++i) {
      if (ids[i] == token) return i;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "input_ids row ", row, ": no ", name, " ", token, " at or after token ", st,
        " where the vision_start tokens announce one"));
  }

  // The processor's mm_token_type_ids: 1 image token, 2 video token, 0 text.
  int TypeOf(int64_t id) const {
    if (id == tokens_.image_token_id) return 1;
    if (id == tokens_.video_token_id) return 2;
    return 0;
  }

  static void AppendText(int64_t text_len, int64_t st_idx, RowPositions* out) {
    for (int64_t k = 0; k < text_len; ++k) {
      for (auto& a : out->axis) a.push_back(st_idx + k);
    }
  }

  // Appends a vision block at `base` and returns its largest position.
  absl::StatusOr<int64_t> AppendVision(int64_t gt, int64_t gh, int64_t gw, bool is_video,
                                       double second_per_grid_t, int64_t base,
                                       RowPositions* out) const {
    int64_t block_max = base;
    for (int64_t k = 0; k < gt; ++k) {
      int64_t t_index = k;
      if (tokens_.family == QwenFamily::kQwen25Vl) {
        // Images: second_per_grid_t 0. Evaluated as transformers does:
        // (k * second_per_grid_t) * tokens_per_second, truncated.
        const double time = static_cast<double>(k) * second_per_grid_t *
                            tokens_.tokens_per_second;
        if (!(time < 9007199254740992.0)) {  // 2^53
          return absl::InvalidArgumentError(absl::StrCat(
              "second_per_grid_ts[", next_video_ - 1, "] is ", second_per_grid_t,
              ": frame ", k, "'s time index ", time, " is past 2^53"));
        }
        t_index = is_video ? static_cast<int64_t>(time) : 0;
      }
      for (int64_t i = 0; i < gh; ++i) {
        for (int64_t j = 0; j < gw; ++j) {
          out->axis[0].push_back(base + t_index);
          out->axis[1].push_back(base + i);
          out->axis[2].push_back(base + j);
        }
      }
      block_max = std::max({block_max, base + t_index, base + gh - 1, base + gw - 1});
    }
    return block_max;
  }

  const QwenTokens& tokens_;
  const std::vector<Grid>& images_;
  const std::vector<Grid>& videos_;
  const std::vector<double>& seconds_;
  int64_t next_image_ = 0;
  int64_t next_video_ = 0;
};

// Decode: cache_position + s + rope_deltas[b] on every axis.
absl::StatusOr<BuiltPositions> DecodePositions(const PositionsRequest& request, int64_t batch,
                                               int64_t seq) {
  if (static_cast<int64_t>(request.rope_deltas.size()) != batch) {
    return absl::InvalidArgumentError(absl::StrCat("rope_deltas has ", request.rope_deltas.size(),
                                                   " values: must be one per batch row (",
                                                   batch, ")"));
  }
  if (request.cache_position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_position is ", request.cache_position, ": must be >= 0"));
  }
  BuiltPositions out;
  out.axes = kAxes;
  out.rows = batch * seq;
  out.positions.resize(kAxes * out.rows);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t delta = request.rope_deltas[b];
    for (int64_t s = 0; s < seq; ++s) {
      // Saturating: an absurd delta is caught by the caller's range check.
      constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
      constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
      const __int128 p = static_cast<__int128>(request.cache_position) + s + delta;
      const int64_t clamped = p > kMax ? kMax : p < kMin ? kMin : static_cast<int64_t>(p);
      for (int a = 0; a < kAxes; ++a) out.positions[a * out.rows + b * seq + s] = clamped;
    }
  }
  out.rope_deltas = request.rope_deltas;
  return out;
}

}  // namespace

absl::StatusOr<BuiltPositions> QwenRopeIndex(const PositionsRequest& request, int64_t max_values,
                                             const Interrupt* interrupt) {
  const int64_t batch = request.batch == 0 ? 1 : request.batch;
  if (batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch is ", request.batch, ": must be >= 0 (0 means 1)"));
  }
  const int64_t total = static_cast<int64_t>(request.input_ids.size());
  if (total == 0) {
    return absl::InvalidArgumentError(
        "input_ids is empty: give the B * S token ids (or grids for axial positions)");
  }
  if (total % batch != 0) {
    return absl::InvalidArgumentError(absl::StrCat("input_ids has ", total,
                                                   " values: must be batch (", batch,
                                                   ") * S"));
  }
  if (total > max_values / kAxes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "input_ids has ", total, " tokens: their 3 positions each are over the limit of ",
        max_values, " values for this call"));
  }
  const int64_t seq = total / batch;
  if (!request.attention_mask.empty()) {
    if (static_cast<int64_t>(request.attention_mask.size()) != total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention_mask has ", request.attention_mask.size(),
          " values: must be empty or one per input_ids value (", total, ")"));
    }
    for (size_t i = 0; i < request.attention_mask.size(); ++i) {
      if (request.attention_mask[i] != 0 && request.attention_mask[i] != 1) {
        return absl::InvalidArgumentError(absl::StrCat("attention_mask[", i, "] is ",
                                                       request.attention_mask[i],
                                                       ": must be 0 or 1"));
      }
    }
  }
  const auto layout = static_cast<int32_t>(request.layout);
  if (layout < 0 || layout > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope_index_layout is ", layout,
        ": must be 0 (ROPE_INDEX_LAYOUT_DEFAULT), 1 (ROPE_INDEX_LAYOUT_TRANSFORMERS_4) or 2 "
        "(ROPE_INDEX_LAYOUT_TRANSFORMERS_5)"));
  }
  const bool transformers5 = request.layout == PositionsRequest::Layout::kTransformers5;
  ROPE_ASSIGN_OR_RETURN(const QwenTokens tokens, ReadQwenTokens(request.hf_config_json, interrupt));
  if (!request.rope_deltas.empty()) return DecodePositions(request, batch, seq);

  ROPE_ASSIGN_OR_RETURN(const std::vector<Grid> images,
                        GridsOf(request.image_grid_thw, "image_grid_thw"));
  ROPE_ASSIGN_OR_RETURN(std::vector<Grid> videos, GridsOf(request.video_grid_thw, "video_grid_thw"));
  for (size_t i = 0; i < request.second_per_grid_ts.size(); ++i) {
    const double s = request.second_per_grid_ts[i];
    if (!std::isfinite(s) || s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("second_per_grid_ts[", i, "] is ", s, ": must be finite and >= 0"));
    }
  }
  if (!request.second_per_grid_ts.empty() && tokens.family == QwenFamily::kQwen25Vl &&
      request.second_per_grid_ts.size() != videos.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "second_per_grid_ts has ", request.second_per_grid_ts.size(),
        " values: must be empty or one per video (", videos.size(), ")"));
  }
  if (tokens.family == QwenFamily::kQwen3Vl) {
    // Qwen3-VL separates a video's frames by timestamps in the text: one
    // grid of one frame per frame.
    std::vector<Grid> frames;
    for (const Grid& v : videos) {
      if (v.t > total) {
        return absl::InvalidArgumentError(absl::StrCat(
            "video_grid_thw has a video of ", v.t, " frames: more than the ", total,
            " input tokens"));
      }
      frames.insert(frames.end(), v.t, Grid{1, v.h, v.w});
    }
    videos = std::move(frames);
  }

  BuiltPositions out;
  out.axes = kAxes;
  out.rows = total;
  // Masked-out tokens: 1 as transformers 4 fills them, 0 as 5 does.
  out.positions.assign(kAxes * total, transformers5 ? 0 : 1);
  out.rope_deltas.resize(batch);
  const bool text_only = images.empty() && videos.empty();
  RowBuilder builder(tokens, images, videos, request.second_per_grid_ts);
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < batch; ++b) {
    const auto kept = [&](int64_t s) {
      return request.attention_mask.empty() || request.attention_mask[b * seq + s] == 1;
    };
    if (text_only) {
      // cumsum(mask) - 1 over kept tokens, 1 (transformers 5: 0) elsewhere;
      // 0 .. S-1 unmasked. Transformers 5's deltas are then 0.
      int64_t count = 0, max = 0;
      for (int64_t s = 0; s < seq; ++s) {
        int64_t p = transformers5 ? 0 : 1;
        if (kept(s)) p = count++;
        for (int a = 0; a < kAxes; ++a) out.positions[a * total + b * seq + s] = p;
        max = std::max(max, p);
      }
      out.rope_deltas[b] = request.attention_mask.empty() || transformers5 ? 0 : max + 1 - seq;
      continue;
    }
    ids.clear();
    for (int64_t s = 0; s < seq; ++s) {
      if (kept(s)) ids.push_back(request.input_ids[b * seq + s]);
    }
    ROPE_ASSIGN_OR_RETURN(const RowPositions row, transformers5
                                                      ? builder.BuildTransformers5(ids, b)
                                                      : builder.Build(ids, b));
    int64_t k = 0;
    for (int64_t s = 0; s < seq; ++s) {
      if (!kept(s)) continue;
      for (int a = 0; a < kAxes; ++a) out.positions[a * total + b * seq + s] = row.axis[a][k];
      ++k;
    }
    // Transformers 5 subtracts the row's unmasked tokens, 4 the row's length.
    out.rope_deltas[b] = row.max + 1 - (transformers5 ? static_cast<int64_t>(ids.size()) : seq);
  }
  return out;
}

}  // namespace rope
