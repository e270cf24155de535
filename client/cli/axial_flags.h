// Axial RoPE and the positions of images and video, as flags shared by
// ropectl and ropeload:
//   --axial_dims=16,56,56 (with --axial_theta, --axial_theta_rescale,
//     --axial_interpolation: one value per axis, or empty) for
//     RopeConfig.axial;
//   --fractional_positions=0.5,1.25 for RotateRequest.fractional_positions;
//   --grid for the axial grid form of BuildPositionsRequest, grids joined by
//     ';', each SIZE[/start=a,b][/step=a,b][/rope_axis=1,0] with SIZE like
//     1x64x64: Flux's text then image ids are
//     --grid='512x1x1/step=0,0,0;1x64x64'.
#ifndef ROPE_CLIENT_CLI_AXIAL_FLAGS_H_
#define ROPE_CLIENT_CLI_AXIAL_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/flag_set.h"
#include "rope/v1/rope.pb.h"

namespace rope {
namespace client {

// --axial_dims, --axial_theta, --axial_theta_rescale, --axial_interpolation.
void AddAxialFlags(FlagSet* flags);
std::vector<std::string> AxialFlagNames();

// Sets config.axial from the flags (nothing without --axial_dims). A usage
// error for a malformed list, or per-axis lists whose length is not the
// number of dims; the values are the server's to check.
absl::Status ApplyAxialFlags(const FlagSet& flags, v1::RopeConfig* config);

// "axial[16,56,56]", with per-axis parameters: "axial[16(theta=256
// theta_rescale=2),56,56]".
std::string DescribeAxial(const v1::RopeConfig& config);
// The flags that give config.axial exactly ("" without it).
std::string AxialAsFlags(const v1::RopeConfig& config);

// --fractional_positions and --grid (Rotate: positions built by the server
// from grids).
void AddPositionSourceFlags(FlagSet* flags);

// The --grid value as PositionGrid messages. INVALID_ARGUMENT naming the
// grid and the part that is malformed.
absl::StatusOr<std::vector<v1::PositionGrid>> ParseGrids(absl::string_view text);

// Sets request.fractional_positions or request.build_positions.grids from
// the flags. A usage error when they go with --positions / --start_pos or
// with each other, or are malformed.
absl::Status ApplyPositionSourceFlags(const FlagSet& flags, v1::RotateRequest* request);

// "positions: fractional 0.5,1.25" or "positions: built from grids
// 512x1x1/step=0,0,0;1x64x64", or "" when neither flag is set.
std::string DescribePositionSource(const FlagSet& flags);

}  // namespace client
}  // namespace rope

#endif  // ROPE_CLIENT_CLI_AXIAL_FLAGS_H_
