"""The provider client against the local fake server: a client per call or one pool.

    python -m tests.bench.bench_client [REQUESTS [ROUNDS]]   # default 200 3

Posts REQUESTS small Chat Completions bodies to a keep-alive `FakeServer` with
`send` opening a client per call, `send` through one ``httpx.Client``, `asend`
through one ``httpx.AsyncClient`` one after the other, and `asend` 20 at a
time on one loop; prints the median time per request over ROUNDS and the
connections the server accepted. The server is Python on the same machine, so
the figures are the client's overhead plus the server's, not a provider's
latency.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable

import httpx
from turnlog.adapters.providers import asend, send
from turnlog.adapters.providers.fakeserver import FakeServer

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
FORMAT = "openai-chat"


def per_call(url: str, n: int) -> None:
    for _ in range(n):
        send(FORMAT, BODY, api_key="k", base_url=url)


def pooled(url: str, n: int) -> None:
    with httpx.Client() as client:
        for _ in range(n):
            send(FORMAT, BODY, api_key="k", base_url=url, client=client)


def async_pooled(url: str, n: int) -> None:
    async def main() -> None:
        async with httpx.AsyncClient() as client:
            for _ in range(n):
                await asend(FORMAT, BODY, api_key="k", base_url=url, client=client)

    asyncio.run(main())


def async_concurrent(url: str, n: int) -> None:
    async def main() -> None:
        async with httpx.AsyncClient() as client:
            for start in range(0, n, 20):
                await asyncio.gather(
                    *[
                        asend(FORMAT, BODY, api_key="k", base_url=url, client=client)
                        for _ in range(min(20, n - start))
                    ]
                )

    asyncio.run(main())


CASES: dict[str, Callable[[str, int], None]] = {
    "send, a client per call": per_call,
    "send, one httpx.Client": pooled,
    "asend, one AsyncClient, in turn": async_pooled,
    "asend, one AsyncClient, 20 at a time": async_concurrent,
}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print(f"{n} requests, median of {rounds} rounds")
    for name, case in CASES.items():
        times, connections = [], 0
        for _ in range(rounds):
            with FakeServer(keep_alive=True) as server:
                url = server.base_url(FORMAT)
                start = time.perf_counter()
                case(url, n)
                times.append((time.perf_counter() - start) / n)
                connections = server.connections
        print(
            f"{name:<38} {statistics.median(times) * 1e3:7.2f} ms/request  "
            f"{connections:>4} connections"
        )


if __name__ == "__main__":
    main()
