#include "client/cli/axial_flags.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli/cli_parsing.h"
#include "client/cli/scaling_flags.h"
#include "common/status_macros.h"

namespace rope {
namespace client {
namespace {

absl::StatusOr<std::vector<double>> ParseDoubles(absl::string_view name, absl::string_view text) {
  std::vector<double> out;
  if (text.empty()) return out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    double value;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(item), &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", text, ": '", item, "' is not a number"));
    }
    out.push_back(value);
  }
  return out;
}

absl::Status ValidateDoubles(absl::string_view text) {
  return ParseDoubles("value", text).status();
}

absl::Status ValidateInts(absl::string_view text) { return ParseInt64List(text).status(); }

absl::Status ValidateGrids(absl::string_view text) {
  if (text.empty()) return absl::OkStatus();
  return ParseGrids(text).status();
}

constexpr const char* kPerAxisFlags[] = {"axial_theta", "axial_theta_rescale",
                                         "axial_interpolation"};

}  // namespace

void AddAxialFlags(FlagSet* flags) {
  flags->BeginGroup("Axial RoPE (images and video)");
  flags->Add("axial_dims", FlagSet::Kind::kString, "",
             "Axial RoPE: the features of each axis, in pair order, summing to rotary_dim (Flux "
             "16,56,56; Wan 2.1 at head 128 44,42,42; SAM 2 at head 256 128,128). Positions then "
             "hold n*S or n*B*S values ordered [axis][b][s].",
             ValidateInts);
  flags->Add("axial_theta", FlagSet::Kind::kString, "",
             "Per-axis theta (one per --axial_dims entry); empty or 0: --theta.", ValidateDoubles);
  flags->Add("axial_theta_rescale", FlagSet::Kind::kString, "",
             "Per-axis theta_rescale (HunyuanVideo's theta_rescale_factor): the base becomes "
             "theta * rescale^(dim/(dim-2)); empty or 0: 1.",
             ValidateDoubles);
  flags->Add("axial_interpolation", FlagSet::Kind::kString, "",
             "Per-axis interpolation (HunyuanVideo's interpolation_factor): positions are "
             "multiplied by it; empty or 0: 1.",
             ValidateDoubles);
}

std::vector<std::string> AxialFlagNames() {
  return {"axial_dims", "axial_theta", "axial_theta_rescale", "axial_interpolation"};
}

absl::Status ApplyAxialFlags(const FlagSet& flags, v1::RopeConfig* config) {
  if (flags.String("axial_dims").empty()) {
    for (const char* name : kPerAxisFlags) {
      if (flags.IsSet(name)) return UsageError(absl::StrCat("--", name, " needs --axial_dims"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<int64_t>> dims = ParseInt64List(flags.String("axial_dims"));
  if (!dims.ok()) return UsageError(dims.status().message());
  v1::AxialRope* axial = config->mutable_axial();
  for (int64_t dim : *dims) {
    if (dim < 0 || dim > UINT32_MAX) {
      return UsageError(absl::StrCat("--axial_dims: ", dim, " does not fit a uint32"));
    }
    axial->add_axes()->set_dim(static_cast<uint32_t>(dim));
  }
  for (const char* name : kPerAxisFlags) {
    absl::StatusOr<std::vector<double>> values = ParseDoubles(name, flags.String(name));
    if (!values.ok()) return UsageError(values.status().message());
    if (values->empty()) continue;
    if (values->size() != dims->size()) {
      return UsageError(absl::StrCat("--", name, " has ", values->size(),
                                     " values: give one per --axial_dims entry (",
                                     dims->size(), ")"));
    }
    for (size_t i = 0; i < values->size(); ++i) {
      v1::RopeAxis* axis = axial->mutable_axes(static_cast<int>(i));
      const double v = (*values)[i];
      if (absl::string_view(name) == "axial_theta") axis->set_theta(v);
      if (absl::string_view(name) == "axial_theta_rescale") axis->set_theta_rescale(v);
      if (absl::string_view(name) == "axial_interpolation") axis->set_interpolation(v);
    }
  }
  return absl::OkStatus();
}

std::string DescribeAxial(const v1::RopeConfig& config) {
  std::vector<std::string> axes;
  for (const v1::RopeAxis& axis : config.axial().axes()) {
    std::vector<std::string> params;
    if (axis.theta() != 0) params.push_back(absl::StrCat("theta=", ExactDecimal(axis.theta())));
    if (axis.theta_rescale() != 0 && axis.theta_rescale() != 1) {
      params.push_back(absl::StrCat("theta_rescale=", ExactDecimal(axis.theta_rescale())));
    }
    if (axis.interpolation() != 0 && axis.interpolation() != 1) {
      params.push_back(absl::StrCat("interpolation=", ExactDecimal(axis.interpolation())));
    }
    axes.push_back(params.empty() ? absl::StrCat(axis.dim())
                                  : absl::StrCat(axis.dim(), "(", absl::StrJoin(params, " "), ")"));
  }
  return absl::StrCat("axial[", absl::StrJoin(axes, ","), "]");
}

std::string AxialAsFlags(const v1::RopeConfig& config) {
  if (!config.has_axial()) return "";
  std::vector<std::string> dims, theta, rescale, interpolation;
  bool any_theta = false, any_rescale = false, any_interpolation = false;
  for (const v1::RopeAxis& axis : config.axial().axes()) {
    dims.push_back(absl::StrCat(axis.dim()));
    theta.push_back(ExactDecimal(axis.theta()));
    rescale.push_back(ExactDecimal(axis.theta_rescale()));
    interpolation.push_back(ExactDecimal(axis.interpolation()));
    any_theta = any_theta || axis.theta() != 0;
    any_rescale = any_rescale || axis.theta_rescale() != 0;
    any_interpolation = any_interpolation || axis.interpolation() != 0;
  }
  std::string out = absl::StrCat("--axial_dims=", absl::StrJoin(dims, ","));
  if (any_theta) absl::StrAppend(&out, " --axial_theta=", absl::StrJoin(theta, ","));
  if (any_rescale) absl::StrAppend(&out, " --axial_theta_rescale=", absl::StrJoin(rescale, ","));
  if (any_interpolation) {
    absl::StrAppend(&out, " --axial_interpolation=", absl::StrJoin(interpolation, ","));
  }
  return out;
}

void AddPositionSourceFlags(FlagSet* flags) {
  flags->Add("fractional_positions", FlagSet::Kind::kString, "",
             "Positions that need not be integers, instead of --positions (the same count and "
             "order): cos and sin computed from them directly, e.g. 0.5,1.25,2.",
             ValidateDoubles);
  flags->Add("grid", FlagSet::Kind::kString, "",
             "Positions built by the server from grids of tokens (axial RoPE), instead of "
             "--positions: grids joined by ';', each SIZE[/start=a,b,..][/step=a,b,..]"
             "[/rope_axis=..] with SIZE like 1x64x64 (row-major, the last dimension fastest). "
             "Flux: '512x1x1/step=0,0,0;1x64x64'; Wan 2.1: 21x30x52.",
             ValidateGrids);
}

absl::StatusOr<std::vector<v1::PositionGrid>> ParseGrids(absl::string_view text) {
  std::vector<v1::PositionGrid> grids;
  for (absl::string_view item : absl::StrSplit(text, ';')) {
    item = absl::StripAsciiWhitespace(item);
    std::vector<absl::string_view> parts = absl::StrSplit(item, '/');
    v1::PositionGrid grid;
    for (absl::string_view size : absl::StrSplit(parts[0], 'x')) {
      int64_t value;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(size), &value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--grid: '", item, "': the size '", parts[0], "' is not like 1x64x64"));
      }
      grid.add_size(value);
    }
    for (size_t i = 1; i < parts.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(parts[i], '=');
      if (kv.first == "rope_axis") {
        absl::StatusOr<std::vector<int64_t>> axes = ParseInt64List(kv.second);
        if (!axes.ok()) return axes.status();
        for (int64_t a : *axes) {
          if (a < 0 || a > UINT32_MAX) {
            return absl::InvalidArgumentError(
                absl::StrCat("--grid: '", item, "': rope_axis value ", a, " is out of range"));
          }
          grid.add_rope_axis(static_cast<uint32_t>(a));
        }
        continue;
      }
      if (kv.first != "start" && kv.first != "step") {
        return absl::InvalidArgumentError(absl::StrCat(
            "--grid: '", item, "': '", parts[i], "' is not start=..., step=... or rope_axis=..."));
      }
      ROPE_ASSIGN_OR_RETURN(std::vector<double> values, ParseDoubles(kv.first, kv.second));
      for (double v : values) {
        if (kv.first == "start") {
          grid.add_start(v);
        } else {
          grid.add_step(v);
        }
      }
    }
    grids.push_back(std::move(grid));
  }
  return grids;
}

absl::Status ApplyPositionSourceFlags(const FlagSet& flags, v1::RotateRequest* request) {
  const bool fractional = !flags.String("fractional_positions").empty();
  const bool grid = !flags.String("grid").empty();
  if (!fractional && !grid) return absl::OkStatus();
  for (const char* other : {"positions", "start_pos"}) {
    if (flags.IsSet(other)) {
      return UsageError(absl::StrCat("--", other, " does not go with --",
                                     fractional ? "fractional_positions" : "grid"));
    }
  }
  if (fractional && grid) return UsageError("give --fractional_positions or --grid, not both");
  if (fractional) {
    absl::StatusOr<std::vector<double>> values =
        ParseDoubles("--fractional_positions", flags.String("fractional_positions"));
    if (!values.ok()) return UsageError(values.status().message());
    request->mutable_fractional_positions()->Assign(values->begin(), values->end());
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<v1::PositionGrid>> grids = ParseGrids(flags.String("grid"));
  if (!grids.ok()) return UsageError(grids.status().message());
  for (v1::PositionGrid& g : *grids) {
    *request->mutable_build_positions()->add_grids() = std::move(g);
  }
  return absl::OkStatus();
}

std::string DescribePositionSource(const FlagSet& flags) {
  if (!flags.String("fractional_positions").empty()) {
    return absl::StrCat("positions: fractional ", flags.String("fractional_positions"));
  }
  if (!flags.String("grid").empty()) {
    return absl::StrCat("positions: built from grids ", flags.String("grid"));
  }
  return "";
}

}  // namespace client
}  // namespace rope
