"""Errors: one RopeError subclass per gRPC status code, keeping the server's message.

    try:
        q, k = client.rotate(q, k, config=config)
    except ropeserve.OutOfRange as e:      # a position >= config.max_len
        print(e.code, e.details)           # grpc.StatusCode.OUT_OF_RANGE, "positions[3] is 9000: ..."

Client-side checks of the arguments (a tensor's rank, dtype or device) raise
ValueError before any call is made; these classes are for what the server
(or the channel) answered.
"""

import grpc


class RopeError(Exception):
    """A call failed with a gRPC status.

    Attributes: code (grpc.StatusCode), details (the server's message, which
    names the offending field and value). str(e) is "CODE: details".
    """

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, details, code=None):
        if code is not None:
            self.code = code
        self.details = details
        super().__init__("%s: %s" % (self.code.name, details))


class Cancelled(RopeError):
    code = grpc.StatusCode.CANCELLED


class Unknown(RopeError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(RopeError):
    """Bad shape, dtype, byte length, config field, ... (the message names it)."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(RopeError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(RopeError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(RopeError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(RopeError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(RopeError):
    """Over a server limit (message size, elements, max_len cap, calls in flight)."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(RopeError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(RopeError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(RopeError):
    """A position >= config.max_len, or table rows past the table."""
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(RopeError, NotImplementedError):
    """The server, or this package's rope.v1 proto, lacks the RPC or field."""
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(RopeError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(RopeError):
    """No server reachable, or every attempt hit a draining server."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(RopeError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(RopeError):
    """Missing or rejected bearer token."""
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
    Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)}


def error_class(code):
    """The RopeError subclass for a grpc.StatusCode (RopeError itself for OK or unknown codes)."""
    return _BY_CODE.get(code, RopeError)


def from_rpc_error(error):
    """The RopeError for a grpc.RpcError (sync) or grpc.aio.AioRpcError."""
    code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
    details = error.details() if callable(getattr(error, "details", None)) else str(error)
    cls = error_class(code)
    return cls(details or "", code=None if cls is not RopeError else code)
