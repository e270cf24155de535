"""Shared memory calls' request messages: register_shm's and rotate_shm's."""

from . import _proto, _tensors
from .shm import CudaRegion, SharedRegion, reference_tensor

pb = _proto.pb


def _region_of(regions, name, tensor):
    for region in regions.values():
        if region.contains(tensor):
            return region
    raise ValueError("%s does not view a region registered through this client (a SharedRegion, "
                     "or a CudaRegion with a base_address; register_shm first)" % name)


def register_request(region):
    """The RegisterSharedMemoryRequest of a SharedRegion or CudaRegion."""
    if not isinstance(region, (SharedRegion, CudaRegion)):
        raise TypeError("region is a %s: expected a ropeserve.SharedRegion or ropeserve.CudaRegion"
                        % type(region).__name__)
    return region.register_request()


def rotate_request(regions, q, k=None, *, config, start_pos=0, positions=None, inverse=False,
                   q_out=None, k_out=None):
    if k_out is not None and k is None:
        raise ValueError("k_out is given but k is not")
    request = pb.RotateRequest(config=config.to_proto(), start_pos=int(start_pos),
                               inverse=bool(inverse), **_tensors.position_fields(positions))
    request.q.CopyFrom(reference_tensor(_region_of(regions, "q", q), q))
    if k is not None:
        request.k.CopyFrom(reference_tensor(_region_of(regions, "k", k), k))
    if q_out is not None:
        request.q_out.CopyFrom(_region_of(regions, "q_out", q_out).ref(q_out))
    if k_out is not None:
        request.k_out.CopyFrom(_region_of(regions, "k_out", k_out).ref(k_out))
    return request
