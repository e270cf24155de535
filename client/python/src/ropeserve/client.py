"""ropeserve.Client: the synchronous client (ropeserve.aio.Client is its asyncio twin)."""

import collections
import queue
import threading

import grpc

from . import _calls, _channel, _proto, _shm_calls
from .config import RopeConfig
from .errors import from_rpc_error


class Client:
    """One gRPC channel to ropeserve; thread-safe, share it.

        with ropeserve.Client("localhost:50051") as client:
            q, k = client.rotate(q, k, config=config, start_pos=17)

    target: any gRPC target. Lists ("ipv4:10.0.0.1:50051,10.0.0.2:50051") and
        DNS names with several addresses ("dns:///ropeserve-headless:50051")
        are balanced round robin; calls that fail with UNAVAILABLE (a
        draining replica) are retried, up to 5 attempts in all.
    tls, ca_file, cert_file, key_file: TLS (on when tls=True or any file is
        given; ca_file: PEM bundle to trust instead of the system's),
        cert_file + key_file: a client certificate for mutual TLS.
    token: a bearer token (needs TLS).
    deadline: seconds per call (for rotate_stream: for the whole stream).
    tune_malloc: the first client of a process sets glibc malloc's mmap and
        trim thresholds so that prefill-size calls reuse freed buffers
        (ropeserve.memory; ROPESERVE_TUNE_MALLOC=0 or False here keeps
        glibc's defaults).

    Every method raises a ropeserve.RopeError subclass for the server's
    status (InvalidArgument, OutOfRange, ...), and ValueError / TypeError for
    unusable arguments before anything is sent.
    """

    def __init__(self, target, *, tls=False, ca_file=None, cert_file=None, key_file=None, token=None,
                 deadline=30.0, tune_malloc=True):
        self._channel, self._deadline = _channel.open_channel(
            grpc, target, tls=tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file,
            token=token, deadline=deadline, tune_malloc=tune_malloc)
        self.target = target
        self._methods, self._rotate_stream = _channel.methods(self._channel)
        self._regions = {}  # name -> SharedRegion / CudaRegion registered through this client

    @property
    def channel(self):
        """The grpc.Channel (e.g. for ropeserve.proto.rope_pb2_grpc stubs)."""
        return self._channel

    @property
    def deadline(self):
        return self._deadline

    def _call(self, method, request_and_decode):
        request, decode = request_and_decode
        try:
            reply = self._methods[method](request, timeout=self._deadline)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        return decode(reply)

    def rotate(self, q, k=None, *, config, start_pos=0, positions=None, inverse=False, build=None,
               dtype=None):
        """Rotates q (and k) by their positions; returns (q, k), k None when not given.

        q: [B, S, Hq, D] or [S, Hq, D]; k: the same rank, B, S and D, its own
        head count (GQA / MQA) and q's dtype. Positions: start_pos + s, or
        explicit `positions` ([S] shared by every row, or [B, S]; M-RoPE
        [3, S] or [3, B, S]; axial [n_axes, S] or [n_axes, B, S]), integers,
        or floats for fractional positions (cos and sin computed from them
        directly); or `build`: a ropeserve.TokenPositions or a list of
        ropeserve.Grid for the server to build them from.
        inverse: rotate by -angle (undo a rotation).
        dtype: the dtype sent ("float32", "float16", "bfloat16"); None: q's own (float32
        for float64). Conversions round once to nearest even (see ropeserve._tensors).
        """
        return self._call("Rotate", _calls.rotate(q, k, config=config, start_pos=start_pos,
                                                  positions=positions, inverse=inverse, build=build,
                                                  dtype=dtype))

    def attention_scores(self, q, k, v=None, *, config, q_start_pos=0, k_start_pos=0, causal=False,
                         softmax=False, scale=None, q_fractional_positions=None,
                         k_fractional_positions=None, dtype=None, results=None, window_left=None,
                         window_right=None, chunk_size=0, q_positions=None, k_positions=None,
                         softcap=0.0, sinks=None, alibi_slopes=None, top_k=0, score_rows_start=0,
                         score_rows_count=0):
        """Attention with RoPE applied inside; returns Scores(scores, output), or
        AttentionResults when `results` is given.

        scores: float32 [B, Hq, Sq, Sk], probabilities when softmax; output:
        float32 [B, Sq, Hq, Dv] = P v when v is given, else None. scale None
        means 1/sqrt(D) (the model's softmax scale with config.hf_config_json).
        q_fractional_positions / k_fractional_positions: fractional positions
        instead of the start positions; masks and ALiBi then compare sequence
        indices (q_start_pos + i, k_start_pos + j).

        results: names of what to compute, some of "scores", "output", "lse",
        "top_k", "key_mass", "score_rows" (rope.v1.AttentionResult); the reply
        is then an AttentionResults holding each by its field's name
        (results["lse"], results.top_k_indices). Without "scores" no
        [Sq, Sk] matrix exists anywhere. Masks and transforms (as in
        FlashAttention): window_left / window_right (positions; None: no
        limit), chunk_size, q_positions / k_positions, softcap, sinks and
        alibi_slopes (one per query head), top_k, score_rows_start /
        score_rows_count. See docs/design.md.
        """
        return self._call("AttentionScores", _calls.attention_scores(
            q, k, v, config=config, q_start_pos=q_start_pos, k_start_pos=k_start_pos, causal=causal,
            softmax=softmax, scale=scale, q_fractional_positions=q_fractional_positions,
            k_fractional_positions=k_fractional_positions, dtype=dtype, results=results, window_left=window_left,
            window_right=window_right, chunk_size=chunk_size, q_positions=q_positions,
            k_positions=k_positions, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
            top_k=top_k, score_rows_start=score_rows_start, score_rows_count=score_rows_count))

    def build_positions(self, source):
        """The positions the server builds from `source`; a ropeserve.Positions.

        source: a ropeserve.TokenPositions (Qwen2-VL, Qwen2.5-VL, Qwen3-VL:
        transformers' get_rope_index, or the decode positions after it), or
        a list of ropeserve.Grid (axial models' latents). Raises
        ropeserve.Unimplemented while rope.proto lacks BuildPositions.
        """
        return self._call("BuildPositions", _calls.build_positions(source))

    def table(self, config, start=0, count=0):
        """Rows start .. start+count-1 of the cos/sin table (count 0: to the end); a Table."""
        return self._call("GetTable", _calls.table(config, start, count))

    def info(self):
        """The server's rope.v1.ServerInfo (version, backend, limits, cache statistics)."""
        return self._call("GetServerInfo", _calls.info())

    def resolve(self, config):
        """What the server derives from config (e.g. RopeConfig.from_hf(...)); a Resolved.

        Raises ropeserve.Unimplemented while rope.proto lacks ResolveConfig.
        """
        request = _calls.resolve(config)
        return self._call("ResolveConfig", request)

    def from_hf(self, source, layer_type=None, *, max_len=None, layout=None, layer_index=None):
        """RopeConfig.from_hf with this server's defaults for the layout and max_len not
        given (ResolvedConfig.hf_layout and max_position_embeddings: one ResolveConfig call)."""
        return RopeConfig.from_hf(source, layer_type, max_len=max_len, layout=layout, client=self,
                                  layer_index=layer_index)

    # ---- Shared memory (same host; see ropeserve.shm) ----

    def register_shm(self, region):
        """Asks the server to map `region` under region.name.

        region: a ropeserve.SharedRegion (host memory), or a ropeserve.CudaRegion (device
        memory by CUDA IPC handle; needs a server with --backend=cuda, others answer
        FailedPrecondition). Regions belong to this client's identity (its token, else its
        certificate, else its connection): use them through the client that registered them.
        """
        request = _shm_calls.register_request(region)
        self._call_message("RegisterSharedMemory", request)
        self._regions[region.name] = region

    def unregister_shm(self, name=""):
        """Forgets region `name` on the server ("": every region of this client)."""
        self._call_message("UnregisterSharedMemory", _proto.pb.UnregisterSharedMemoryRequest(name=name))
        if name:
            self._regions.pop(name, None)
        else:
            self._regions.clear()

    def shm_status(self, name=""):
        """The server's view of this client's regions: a list of rope.v1.SharedMemoryRegionStatus
        (name, key, offset, byte_size; cuda_ipc and cuda_device for a CudaRegion)."""
        return list(self._call_message("SharedMemoryStatus",
                                       _proto.pb.SharedMemoryStatusRequest(name=name)).regions)

    def rotate_shm(self, q, k=None, *, config, start_pos=0, positions=None, inverse=False,
                   q_out=None, k_out=None):
        """Rotates q (and k) by reference: arrays / tensors viewing registered regions.

        SharedRegion views are numpy arrays or torch CPU tensors; CudaRegion views are torch
        CUDA tensors or arrays with __cuda_array_interface__ (cupy), rotated on the server's
        device (finish writing them first: synchronize the stream). One call uses one kind.

        Without q_out (k_out) the result is written in place; with it, into
        that view (same dtype and size, overlapping no input). Nothing is
        returned: the results are in the views.
        """
        request = _shm_calls.rotate_request(self._regions, q, k, config=config, start_pos=start_pos,
                                            positions=positions, inverse=inverse, q_out=q_out,
                                            k_out=k_out)
        self._call_message("Rotate", request)

    def _call_message(self, method, message):
        def decode(reply):
            reply_class = getattr(_proto.pb, _proto.SERVICE.methods_by_name[method].output_type.name)
            return reply_class.FromString(reply)
        return self._call(method, (message.SerializeToString(), decode))

    def rotate_stream(self, requests, *, config=None):
        """Rotates each request on one stream; yields (q, k) per request, in order.

        requests: an iterable of ropeserve.RotateRequest, or of dicts of
        rotate()'s arguments; `config` is used where a request has none. The
        iterable is read as the stream goes (it may be a generator of decode
        steps). A request with unusable arguments ends the stream: the
        replies before it are yielded, then its ValueError / TypeError is
        raised. A server error ends the stream with that request's status.
        """
        decoders = collections.deque()
        failure = queue.SimpleQueue()
        stopped = threading.Event()

        def request_bytes():
            # Runs on gRPC's thread; an exception here would cancel the call
            # without saying why, so argument errors are handed over instead.
            for item in requests:
                if stopped.is_set():
                    return
                try:
                    request, decode = _calls.rotate_stream_item(item, config)
                except (ValueError, TypeError) as e:
                    failure.put(e)
                    return
                decoders.append(decode)
                yield request

        call = self._rotate_stream(request_bytes(), timeout=self._deadline)
        try:
            for reply in call:
                yield decoders.popleft()(reply)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        finally:
            stopped.set()
            call.cancel()
        if not failure.empty():
            raise failure.get()

    def close(self):
        """Unregisters the regions this client registered, then closes the channel (calls in
        flight are cancelled).

        The server keeps a region until it is unregistered, so one left behind by a script
        that stopped early would make its next run's register_shm fail with AlreadyExists;
        leaving `with Client(...)` (also by an exception) cleans up. Best effort: a server
        that cannot be reached keeps them until it drains.
        """
        for name in list(self._regions):
            try:
                self._methods["UnregisterSharedMemory"](
                    _proto.pb.UnregisterSharedMemoryRequest(name=name).SerializeToString(),
                    timeout=min(self._deadline, 2.0))
            except grpc.RpcError:
                pass
        self._regions.clear()
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
