"""ropeserve.aio.Client: the asyncio twin of ropeserve.Client, on grpc.aio.

    async with ropeserve.aio.Client("localhost:50051") as client:
        q, k = await client.rotate(q, k, config=config)
        async for q, k in client.rotate_stream(requests, config=config):
            ...

Same arguments, results and errors as ropeserve.Client. Create it inside
the event loop that uses it (grpc.aio channels belong to one loop).
"""

import collections

import grpc
import grpc.aio

from . import _calls, _channel, _proto, _shm_calls
from .config import RopeConfig, read_hf_config
from .errors import from_rpc_error


class Client:
    """One grpc.aio channel to ropeserve; see ropeserve.Client for the arguments."""

    def __init__(self, target, *, tls=False, ca_file=None, cert_file=None, key_file=None, token=None,
                 deadline=30.0, tune_malloc=True):
        self._channel, self._deadline = _channel.open_channel(
            grpc.aio, target, tls=tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file,
            token=token, deadline=deadline, tune_malloc=tune_malloc)
        self.target = target
        self._methods, self._rotate_stream = _channel.methods(self._channel)
        self._regions = {}  # name -> SharedRegion / CudaRegion registered through this client

    @property
    def channel(self):
        """The grpc.aio.Channel."""
        return self._channel

    @property
    def deadline(self):
        return self._deadline

    async def _call(self, method, request_and_decode):
        request, decode = request_and_decode
        try:
            reply = await self._methods[method](request, timeout=self._deadline)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        return decode(reply)

    async def rotate(self, q, k=None, *, config, start_pos=0, positions=None, inverse=False,
                     build=None, dtype=None):
        """See ropeserve.Client.rotate."""
        return await self._call("Rotate", _calls.rotate(q, k, config=config, start_pos=start_pos,
                                                        positions=positions, inverse=inverse,
                                                        build=build, dtype=dtype))

    async def attention_scores(self, q, k, v=None, *, config, q_start_pos=0, k_start_pos=0,
                               causal=False, softmax=False, scale=None, q_fractional_positions=None,
                               k_fractional_positions=None, dtype=None,
                               results=None, window_left=None, window_right=None, chunk_size=0,
                               q_positions=None, k_positions=None, softcap=0.0, sinks=None,
                               alibi_slopes=None, top_k=0, score_rows_start=0,
                               score_rows_count=0):
        """See ropeserve.Client.attention_scores."""
        return await self._call("AttentionScores", _calls.attention_scores(
            q, k, v, config=config, q_start_pos=q_start_pos, k_start_pos=k_start_pos, causal=causal,
            softmax=softmax, scale=scale, q_fractional_positions=q_fractional_positions,
            k_fractional_positions=k_fractional_positions, dtype=dtype, results=results, window_left=window_left,
            window_right=window_right, chunk_size=chunk_size, q_positions=q_positions,
            k_positions=k_positions, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
            top_k=top_k, score_rows_start=score_rows_start, score_rows_count=score_rows_count))

    async def build_positions(self, source):
        """See ropeserve.Client.build_positions."""
        return await self._call("BuildPositions", _calls.build_positions(source))

    async def table(self, config, start=0, count=0):
        """See ropeserve.Client.table."""
        return await self._call("GetTable", _calls.table(config, start, count))

    async def info(self):
        """See ropeserve.Client.info."""
        return await self._call("GetServerInfo", _calls.info())

    async def resolve(self, config):
        """See ropeserve.Client.resolve."""
        return await self._call("ResolveConfig", _calls.resolve(config))

    async def from_hf(self, source, layer_type=None, *, max_len=None, layout=None,
                      layer_index=None):
        """See ropeserve.Client.from_hf."""
        text, parsed = read_hf_config(source)
        resolved = None
        if layout is None or max_len is None:
            probe = RopeConfig._hf_probe(text, layer_type, max_len, layout, layer_index)
            resolved = (await self.resolve(probe)).message
        return RopeConfig._from_hf_answer(text, parsed, layer_type, max_len, layout, resolved,
                                          layer_index)

    # ---- Shared memory (same host; see ropeserve.shm and ropeserve.Client) ----

    async def register_shm(self, region):
        """See ropeserve.Client.register_shm."""
        request = _shm_calls.register_request(region)
        await self._call_message("RegisterSharedMemory", request)
        self._regions[region.name] = region

    async def unregister_shm(self, name=""):
        """See ropeserve.Client.unregister_shm."""
        await self._call_message("UnregisterSharedMemory",
                                 _proto.pb.UnregisterSharedMemoryRequest(name=name))
        if name:
            self._regions.pop(name, None)
        else:
            self._regions.clear()

    async def shm_status(self, name=""):
        """See ropeserve.Client.shm_status."""
        reply = await self._call_message("SharedMemoryStatus",
                                         _proto.pb.SharedMemoryStatusRequest(name=name))
        return list(reply.regions)

    async def rotate_shm(self, q, k=None, *, config, start_pos=0, positions=None, inverse=False,
                         q_out=None, k_out=None):
        """See ropeserve.Client.rotate_shm."""
        request = _shm_calls.rotate_request(self._regions, q, k, config=config, start_pos=start_pos,
                                            positions=positions, inverse=inverse, q_out=q_out,
                                            k_out=k_out)
        await self._call_message("Rotate", request)

    async def _call_message(self, method, message):
        reply_class = getattr(_proto.pb, _proto.SERVICE.methods_by_name[method].output_type.name)
        return await self._call(method, (message.SerializeToString(), reply_class.FromString))

    async def rotate_stream(self, requests, *, config=None):
        """See ropeserve.Client.rotate_stream; `requests` may also be an async iterable."""
        decoders = collections.deque()
        failure = []

        def encode(item):
            try:
                request, decode = _calls.rotate_stream_item(item, config)
            except (ValueError, TypeError) as e:
                failure.append(e)
                return None
            decoders.append(decode)
            return request

        async def request_bytes():
            if hasattr(requests, "__aiter__"):
                async for item in requests:
                    request = encode(item)
                    if request is None:
                        return
                    yield request
            else:
                for item in requests:
                    request = encode(item)
                    if request is None:
                        return
                    yield request

        call = self._rotate_stream(request_bytes(), timeout=self._deadline)
        try:
            async for reply in call:
                yield decoders.popleft()(reply)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        finally:
            call.cancel()
        if failure:
            raise failure[0]

    async def close(self):
        """Unregisters this client's regions, then closes the channel (see
        ropeserve.Client.close)."""
        for name in list(self._regions):
            try:
                await self._methods["UnregisterSharedMemory"](
                    _proto.pb.UnregisterSharedMemoryRequest(name=name).SerializeToString(),
                    timeout=min(self._deadline, 2.0))
            except grpc.RpcError:
                pass
        self._regions.clear()
        await self._channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False
