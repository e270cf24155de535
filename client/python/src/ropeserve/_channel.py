"""Channel settings shared by the sync and asyncio clients.

The same service config as the C++ client (client/client_options.cc):
round_robin over every address the target resolves to, client-side health
checking (a draining server leaves the rotation before it closes its
connections), and up to 5 attempts of a rope.v1.RopeService call that failed
with UNAVAILABLE, so it lands on another replica or a new connection (the
backoffs and why: client/client_options.h, ClientOptions.retry_max_attempts).
"""

import json
import numbers

import grpc

from . import _proto, memory

MAX_MESSAGE_BYTES = 512 << 20
RETRY_MAX_ATTEMPTS = 5
RETRY_INITIAL_BACKOFF_S = 0.1
RETRY_MAX_BACKOFF_S = 1.0


def service_config_json():
    return json.dumps({
        "loadBalancingConfig": [{"round_robin": {}}],
        "healthCheckConfig": {"serviceName": ""},
        "methodConfig": [{
            "name": [{"service": _proto.SERVICE.full_name}],
            "retryPolicy": {
                "maxAttempts": RETRY_MAX_ATTEMPTS,
                "initialBackoff": "%.3fs" % RETRY_INITIAL_BACKOFF_S,
                "maxBackoff": "%.3fs" % RETRY_MAX_BACKOFF_S,
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }],
    }, separators=(",", ":"))


def channel_options():
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.service_config", service_config_json()),
        ("grpc.enable_retries", 1),
        # The retry buffer must hold a whole request for it to be replayed on
        # another replica; the default (256 KiB) would disable retries of
        # large tensors.
        ("grpc.per_rpc_retry_buffer_size", MAX_MESSAGE_BYTES),
    ]


def check_deadline(deadline):
    if (not isinstance(deadline, numbers.Real) or isinstance(deadline, bool)
            or not deadline > 0 or deadline == float("inf")):
        raise ValueError("deadline is %r: expected seconds > 0" % (deadline,))
    return float(deadline)


def _read(name, path):
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise ValueError("%s=%s: the file is empty" % (name, path))
    return data


def _check_token(token):
    if not isinstance(token, str) or not token:
        raise ValueError("token is %r: expected a non-empty string" % (token,))
    if any(not 0x20 < ord(c) < 0x7F for c in token):
        raise ValueError("token must be printable ASCII without spaces")


def credentials(tls, ca_file, cert_file, key_file, token):
    """grpc.ChannelCredentials, or None for plaintext. ValueError for unusable combinations.

    TLS is on when tls is true or any file is given; without ca_file the
    system's CA store is trusted. cert_file and key_file (mutual TLS) go
    together. A bearer token needs TLS: gRPC sends call credentials only over
    secure channels, and ropeserve accepts tokens only with TLS.
    """
    if (cert_file is None) != (key_file is None):
        raise ValueError("cert_file and key_file go together: give both or neither")
    if token is not None:
        _check_token(token)
    if not (tls or ca_file or cert_file):
        if token is not None:
            raise ValueError("token needs TLS (gRPC sends tokens only over secure channels): "
                             "pass tls=True or ca_file=")
        return None
    creds = grpc.ssl_channel_credentials(
        root_certificates=_read("ca_file", ca_file) if ca_file else None,
        private_key=_read("key_file", key_file) if key_file else None,
        certificate_chain=_read("cert_file", cert_file) if cert_file else None)
    if token is not None:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
    return creds


UNARY_METHODS = ("Rotate", "AttentionScores", "GetTable", "GetServerInfo", "ResolveConfig",
                 "RegisterSharedMemory", "UnregisterSharedMemory", "SharedMemoryStatus",
                 "BuildPositions")


def methods(channel):
    """({RPC name: unary multi-callable}, RotateStream multi-callable) on a sync or aio channel.

    Without (de)serializers: requests are built as bytes by _calls and
    replies are decoded from bytes without copying their tensors.
    ResolveConfig is there only when rope.proto has it.
    """
    unary = {name: channel.unary_unary(_proto.method_path(name))
             for name in UNARY_METHODS if name in _proto.SERVICE.methods_by_name}
    return unary, channel.stream_stream(_proto.method_path("RotateStream"))


def open_channel(grpc_api, target, *, tls, ca_file, cert_file, key_file, token, deadline,
                 tune_malloc):
    """(channel, deadline in seconds) for a client: the arguments checked in order
    (ValueError naming the first unusable one), glibc's malloc tuned when
    tune_malloc, and the channel opened through grpc_api (grpc or grpc.aio)
    with channel_options()."""
    if not isinstance(target, str) or not target:
        raise ValueError("target is %r: expected a gRPC target such as 'localhost:50051'" % (target,))
    if tune_malloc:
        # Prefill-size calls reuse freed buffers instead of faulting in fresh pages
        # (ropeserve.memory; a process-wide glibc setting, once per process).
        memory.tune_malloc_for_clients()
    deadline = check_deadline(deadline)
    creds = credentials(tls, ca_file, cert_file, key_file, token)
    if creds is None:
        return grpc_api.insecure_channel(target, options=channel_options()), deadline
    return grpc_api.secure_channel(target, creds, options=channel_options()), deadline
