"""ropeserve.aio.Client: the asyncio twin gives the same results and errors."""

import asyncio

import numpy as np
import pytest
import torch

import ropeserve
import rope_reference as ref

CONFIG = ropeserve.RopeConfig(head_dim=16, max_len=64, layout="half")
RNG = np.random.default_rng(5)


def run(coroutine_function, server):
    async def main():
        async with ropeserve.aio.Client(server.address, deadline=20.0) as client:
            return await coroutine_function(client)
    return asyncio.run(main())


def test_aio_rotate_scores_table_info(server, client):
    q = RNG.standard_normal((1, 4, 4, 16)).astype(np.float32)
    k = torch.randn(1, 4, 2, 16, dtype=torch.bfloat16)

    async def calls(c):
        return (await c.info(), await c.rotate(q, config=CONFIG, start_pos=3),
                await c.rotate(k, config=CONFIG, start_pos=3),
                await c.attention_scores(q, q, q, config=CONFIG, causal=True, softmax=True),
                await c.table(CONFIG, 2, 5))

    info, (q_out, _), (k_out, _), scores, table = run(calls, server)
    assert info.version == client.info().version
    ref.assert_close(q_out, ref.rotate(q, 3 + np.arange(4), ref.plain_inv_freq(10000.0, 16), 16, True),
                     "float32")
    assert k_out.dtype == torch.bfloat16 and torch.equal(k_out, client.rotate(k, config=CONFIG, start_pos=3)[0])
    want = client.attention_scores(q, q, q, config=CONFIG, causal=True, softmax=True)
    np.testing.assert_array_equal(scores.scores, want.scores)
    np.testing.assert_array_equal(scores.output, want.output)
    np.testing.assert_array_equal(table.cos, client.table(CONFIG, 2, 5).cos)


def test_aio_concurrent_calls(server, client):
    inputs = [RNG.standard_normal((1, 2, 2, 16)).astype(np.float32) for _ in range(16)]

    async def calls(c):
        return await asyncio.gather(*(c.rotate(x, config=CONFIG, start_pos=i) for i, x in enumerate(inputs)))

    for i, (x, (got, _)) in enumerate(zip(inputs, run(calls, server))):
        np.testing.assert_array_equal(got, client.rotate(x, config=CONFIG, start_pos=i)[0])


def test_aio_stream_from_an_async_generator(server, client):
    inputs = [RNG.standard_normal((1, 1, 2, 16)).astype(np.float32) for _ in range(5)]

    async def requests():
        for i, x in enumerate(inputs):
            await asyncio.sleep(0)
            yield {"q": x, "start_pos": i}

    async def calls(c):
        return [q async for q, _ in c.rotate_stream(requests(), config=CONFIG)]

    got = run(calls, server)
    assert len(got) == 5
    for i, (x, q_out) in enumerate(zip(inputs, got)):
        np.testing.assert_array_equal(q_out, client.rotate(x, config=CONFIG, start_pos=i)[0])


def test_aio_errors_are_rope_errors(server):
    async def out_of_range(c):
        await c.rotate(np.zeros((1, 2, 2, 16), np.float32), config=CONFIG, start_pos=63)

    with pytest.raises(ropeserve.OutOfRange, match="max_len 64"):
        run(out_of_range, server)

    async def stream_error(c):
        requests = [{"q": np.zeros((1, 1, 2, 16), np.float32), "start_pos": p} for p in (1, 2, 99)]
        return [q async for q, _ in c.rotate_stream(requests, config=CONFIG)]

    with pytest.raises(ropeserve.OutOfRange):
        run(stream_error, server)

    async def bad_argument(c):
        await c.rotate(np.zeros((2, 16), np.float32), config=CONFIG)

    with pytest.raises(ValueError, match="q has rank 2"):
        run(bad_argument, server)

    async def resolve(c):
        await c.resolve(CONFIG)

    if not ropeserve.HAS_RESOLVE:
        with pytest.raises(ropeserve.Unimplemented):
            run(resolve, server)
