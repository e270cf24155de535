"""Python client of ropeserve, the rotary position embedding (RoPE) service.

    import ropeserve, torch
    config = ropeserve.RopeConfig(head_dim=128, max_len=8192, theta=500000.0, layout="half")
    with ropeserve.Client("localhost:50051") as client:
        q, k = client.rotate(torch.randn(1, 16, 32, 128, dtype=torch.bfloat16),
                             torch.randn(1, 16, 8, 128, dtype=torch.bfloat16),
                             config=config, start_pos=100)

ropeserve.Client (sync) and ropeserve.aio.Client (asyncio) call the service;
ropeserve.torch.RemoteRotaryEmbedding is a torch.nn.Module for
transformers-style attention code; ropeserve.diffusion has drop-ins for
Flux's EmbedND / apply_rope and Wan 2.1's rope_apply (axial RoPE). Errors are ropeserve.RopeError
subclasses, one per gRPC status code. The generated rope.v1 modules are
ropeserve.proto.rope_pb2 and ropeserve.proto.rope_pb2_grpc.
ropeserve.merge_attention() combines attention computed over disjoint key
ranges (by several calls or replicas) from each range's output and
log-sum-exp. ropeserve.tune_malloc() makes prefill-size calls faster by keeping freed
memory for reuse (a process-wide glibc setting; see ropeserve.memory).
"""

from . import aio
from ._calls import AttentionResults, Resolved, RotateRequest, Scores, Table
from .client import Client
from .shm import CudaRegion, SharedRegion
from .config import (AxialRope, DeepseekYarnScaling, DynamicNtkAlphaScaling, DynamicNtkScaling,
                     Layout, Llama3Scaling, LinearScaling, LongRopeScaling, Mrope, NoRope, NtkScaling,
                     ProportionalScaling, RopeAxis, RopeConfig, YarnScaling)
from .positions import Grid, Positions, TokenPositions
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, FailedPrecondition,
                     Internal, InvalidArgument, NotFound, OutOfRange, PermissionDenied, ResourceExhausted,
                     RopeError, Unauthenticated, Unavailable, Unimplemented, Unknown)
from ._proto import HAS_AXIAL, HAS_BUILD_POSITIONS, HAS_HF_CONFIG, HAS_RESOLVE
from .memory import tune_malloc
from .merge import merge_attention

__version__ = "0.1.0"

__all__ = [
    "Client", "RopeConfig", "Layout", "LinearScaling", "DynamicNtkScaling", "YarnScaling",
    "Llama3Scaling", "LongRopeScaling", "ProportionalScaling", "DynamicNtkAlphaScaling", "NtkScaling",
    "DeepseekYarnScaling", "NoRope", "Mrope", "AxialRope", "RopeAxis",
    "Grid", "TokenPositions", "Positions", "RotateRequest", "Scores", "AttentionResults",
    "Table", "Resolved",
    "RopeError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "HAS_HF_CONFIG", "HAS_RESOLVE", "HAS_AXIAL", "HAS_BUILD_POSITIONS", "SharedRegion", "CudaRegion", "tune_malloc",
    "merge_attention",
]
