// The metadata by which ropeserve tells a client how many attempts a call
// took, so that clients (ropeload) can count gRPC's retries.
//
// gRPC's retry machinery sends "grpc-previous-rpc-attempts" (gRFC A6) with
// each retried attempt, but gRPC C++ 1.51 does not hand the count to the
// client application. ropeserve copies the header it received into the
// trailing metadata "rope-previous-attempts" (additive: clients that do not
// look see no change).
#ifndef ROPE_COMMON_RETRY_METADATA_H_
#define ROPE_COMMON_RETRY_METADATA_H_

namespace rope {

inline constexpr char kGrpcPreviousAttemptsHeader[] = "grpc-previous-rpc-attempts";
inline constexpr char kPreviousAttemptsTrailer[] = "rope-previous-attempts";

}  // namespace rope

#endif  // ROPE_COMMON_RETRY_METADATA_H_
