"""What a session's recorded requests cost: input, cache-write and cache-read tokens.

Theory of operation
-------------------
A provider bills a prompt in up to three shares: the tokens its prompt cache
served (cache reads, a tenth of the input price on Anthropic and OpenAI), the
tokens it put into the cache (cache writes, billed above the input price where
writes are billed at all), and the rest at the input price. Which tokens a cache
serves follows from the prompts alone, so the shares of every recorded request
are a pure function of the re-packed prompts (which replay reproduces byte for
byte), in order, and a `CacheRule` per wire format:

* A prompt is read as blocks in the order the providers' caches read them: the
  tool definitions (one block), each system section, each message.
* **Breakpoint caching** (``CacheRule(breakpoints=True)``, Anthropic's
  ``cache_control``): the cache holds the prefixes that end at a request's cache
  breakpoints (the first ``limit`` of them, as the renderer marks them) and at
  least ``minimum`` tokens long. A request reads the longest prefix the previous
  request of the same format and model left in the cache that it repeats block
  for block, found from one of its own breakpoints at most ``lookback`` blocks
  after it; it writes its prefix from there up to its last breakpoint; the rest
  is plain input.
* **Prefix caching** (``CacheRule(breakpoints=False)``, OpenAI's automatic
  caching): every prefix of ``minimum`` tokens or more is cached; a request reads
  the prefix it shares with the previous request, rounded down to ``minimum``
  plus a multiple of ``increment``, and writes are not billed apart (all the
  rest is plain input).

Token counts are the request's own (the tokenizer it was packed with), so the
figures are estimates of what the provider counts; framing tokens outside the
blocks are plain input. Prices are the policy's, per million tokens
(``input_price``, ``cache_write_price``, ``cache_read_price``), the policy the
request was packed under. The usage the provider reported (a ``ResponseReceived``
naming the request) is put beside the estimate, priced the same way. Nothing here
reads the log: `Replayer.cost` re-packs the requests and hands them in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from ._events import Usage
from ._pack._model import SUMMARY_SECTION, Packed
from ._policy import Policy
from ._prompt import Message, Prompt
from ._validation import check_integer, check_type

__all__ = [
    "BREAKPOINT_CACHE",
    "CacheRule",
    "CostTotal",
    "CostedRequest",
    "PREFIX_CACHE",
    "RequestCost",
    "SessionCost",
    "cost_of",
]

_MILLION = 1_000_000


class CacheRule(msgspec.Struct, frozen=True, kw_only=True):
    """How a provider's prompt cache serves a prompt (see the module docstring).

    Attributes:
        breakpoints: the cache holds the prefixes that end at the prompt's cache
            breakpoints and writes are billed (Anthropic); False: every prefix is
            cached and writes are not billed apart (OpenAI).
        minimum: the shortest prefix the cache holds, in tokens.
        increment: a prefix-cached read is ``minimum`` plus a multiple of this many
            tokens (OpenAI: 128).
        lookback: how many blocks before one of its breakpoints a request finds a
            cached prefix (Anthropic: about 20).
        limit: the breakpoints a request may mark (Anthropic: 4).
    """

    breakpoints: bool = True
    minimum: int = 1024
    increment: int = 1
    lookback: int = 20
    limit: int = 4

    def __post_init__(self) -> None:
        check_type(self.breakpoints, bool, "breakpoints")
        check_integer(self.minimum, "minimum", min_value=0)
        check_integer(self.increment, "increment", min_value=1)
        check_integer(self.lookback, "lookback", min_value=0)
        check_integer(self.limit, "limit", min_value=0)


#: Anthropic's ``cache_control`` breakpoints (1,024 tokens at least, 20 blocks of lookback,
#: 4 breakpoints).
BREAKPOINT_CACHE = CacheRule(breakpoints=True, minimum=1024, lookback=20, limit=4)
#: OpenAI's automatic prefix caching (1,024 tokens at least, then steps of 128).
PREFIX_CACHE = CacheRule(breakpoints=False, minimum=1024, increment=128)


class CostedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded request as `cost_of` takes it.

    Attributes:
        request_seq: the seq of its ``RequestIssued`` record.
        format: the wire format it was recorded for (which cache it reaches).
        model: the model it was recorded for.
        packed: its prompt, re-packed (None when it could not be: ``note`` says why).
        policy: the policy it was packed under (its prices).
        rule: the cache rule of its format.
        reported: the usage the provider reported for it, if a response recorded one.
        note: why there is no estimate.
    """

    request_seq: int
    format: str
    model: str
    packed: Packed | None
    policy: Policy | None
    rule: CacheRule
    reported: Usage | None = None
    note: str = ""


class RequestCost(msgspec.Struct, frozen=True, kw_only=True):
    """The cost of one recorded request.

    Attributes:
        request_seq, format, model: the record's.
        tokens: the prompt's tokens (``input_tokens + cache_write_tokens +
            cache_read_tokens``).
        input_tokens: tokens billed at the input price.
        cache_write_tokens: tokens written to the cache (billed at the write price).
        cache_read_tokens: tokens the cache served (billed at the read price).
        price: the estimate's price in the prices' currency (dollars by default).
        prices: the policy's prices per million tokens: ``input``, ``cache_write``,
            ``cache_read``.
        reported: the usage the provider reported (None when no response recorded one);
            its ``input_tokens`` is the whole prompt, cached parts included.
        reported_price: the reported usage priced the same way (None without one).
        note: why there is no estimate (the request does not re-pack); its token
            figures are then 0 and it is left out of the estimated total.
    """

    request_seq: int
    format: str
    model: str
    tokens: int
    input_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    price: float
    prices: dict[str, float]
    reported: Usage | None = None
    reported_price: float | None = None
    note: str = ""


class CostTotal(msgspec.Struct, frozen=True, kw_only=True):
    """Sums over a session's requests.

    Attributes:
        requests: the requests estimated (those with no ``note``).
        tokens, input_tokens, cache_write_tokens, cache_read_tokens, price: their sums.
        cached_share: ``cache_read_tokens / tokens`` (0.0 without tokens).
        reported_requests: the requests with reported usage.
        reported: the sum of their reported usage.
        reported_price: its price.
    """

    requests: int
    tokens: int
    input_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    price: float
    cached_share: float
    reported_requests: int
    reported: Usage
    reported_price: float


class SessionCost(msgspec.Struct, frozen=True, kw_only=True):
    """What a session's recorded requests cost, per request and in total."""

    session: str
    requests: tuple[RequestCost, ...]
    total: CostTotal


def _same_message(a: Message, b: Message) -> bool:
    # What the provider sees: ``source`` (lineage positions) is never sent.
    return (
        a.role == b.role
        and a.parts == b.parts
        and a.tool_call_id == b.tool_call_id
        and a.name == b.name
        and a.is_error == b.is_error
    )


class _Shape:
    """A prompt as the cache reads it: blocks, their cumulative tokens, breakpoints."""

    __slots__ = ("ends", "marks", "prompt", "tools")

    def __init__(self, packed: Packed, rule: CacheRule) -> None:
        prompt = packed.prompt
        self.prompt = prompt
        self.tools = 1 if prompt.tools else 0
        sizes = (
            ([packed.budget.tools] if prompt.tools else [])
            + list(packed.section_tokens)
            + list(packed.message_tokens)
        )
        ends = [0]
        for size in sizes:
            ends.append(ends[-1] + size)
        #: ends[k]: tokens of the first k blocks
        self.ends = ends
        self.marks = _marks(prompt, self.tools, rule.limit) if rule.breakpoints else ()

    def shared(self, other: _Shape) -> int:
        """The blocks this prompt repeats from the start of ``other``."""
        a, b = self.prompt, other.prompt
        if a.tools != b.tools:
            return 0
        k = self.tools
        for sa, sb in zip(a.system, b.system, strict=False):
            if sa != sb:
                return k
            k += 1
        if len(a.system) != len(b.system):
            return k
        for ma, mb in zip(a.messages, b.messages, strict=False):
            if not _same_message(ma, mb):
                return k
            k += 1
        return k


def _marks(prompt: Prompt, tools: int, limit: int) -> tuple[int, ...]:
    """Block counts of the prefixes the prompt's breakpoints end, as a renderer marks them
    (a breakpoint with nothing to sit on is skipped; at most ``limit``)."""
    sections = len(prompt.system)
    summary = bool(prompt.system) and prompt.system[-1].name == SUMMARY_SECTION
    static = sections - 1 if summary else sections
    found: list[int] = []
    for point in prompt.breakpoints:
        at: int | None
        if point.at == "tools":
            at = tools if tools else (static if static else None)
        elif point.at == "system":
            at = tools + static if static else (tools if tools else None)
        elif point.at == "summary":
            at = tools + sections if summary else None
        else:
            at = (
                tools + sections + point.index + 1
                if 0 <= point.index < len(prompt.messages)
                else None
            )
        if at is None or at in found:
            continue
        if len(found) == limit:
            break
        found.append(at)
    return tuple(sorted(found))


def _split(
    shape: _Shape, total: int, previous: tuple[_Shape, tuple[int, ...]] | None, rule: CacheRule
) -> tuple[int, int, int, tuple[int, ...]]:
    """(input, cache write, cache read) tokens of a prompt, and the block counts of the
    prefixes it leaves in the cache."""
    ends = shape.ends
    shared = 0
    if previous is not None:
        shared = shape.shared(previous[0])
    if not rule.breakpoints:
        tokens = ends[shared]
        read = (
            0
            if tokens < rule.minimum
            else rule.minimum + (tokens - rule.minimum) // rule.increment * rule.increment
        )
        read = min(read, total)
        return total - read, 0, read, ()
    cached = previous[1] if previous is not None else ()
    hit = 0
    for entry in cached:
        if entry <= shared and any(entry <= mark <= entry + rule.lookback for mark in shape.marks):
            hit = max(hit, entry)
    read = ends[hit]
    written = [mark for mark in shape.marks if ends[mark] >= rule.minimum]
    last = max(written, default=0)
    write = max(0, ends[last] - read)
    read, write = min(read, total), min(write, max(0, total - read))
    # What the cache holds after this request: its breakpoints' prefixes, and the
    # prefix it read (refreshed by the read).
    holds = tuple(sorted({*written, *([hit] if hit else [])}))
    return total - read - write, write, read, holds


def _price(input_tokens: int, write: int, read: int, policy: Policy) -> float:
    return round(
        (
            input_tokens * policy.input_price
            + write * policy.cache_write_price
            + read * policy.cache_read_price
        )
        / _MILLION,
        9,
    )


def _reported_price(usage: Usage, policy: Policy) -> float:
    plain = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
    return _price(plain, usage.cache_write_tokens, usage.cache_read_tokens, policy)


def cost_of(session: str, requests: Iterable[CostedRequest]) -> SessionCost:
    """The cost of a session's recorded requests, given in record order.

    Parameters:
        session: the session's id (reported back).
        requests: its requests, oldest first, re-packed (`Replayer.cost` gathers them).

    Returns:
        A `SessionCost`: one `RequestCost` per request and the totals.
    """
    rows: list[RequestCost] = []
    # (format, model) -> the previous request's shape and what it left in the cache
    previous: dict[tuple[str, str], tuple[_Shape, tuple[int, ...]]] = {}
    for request in requests:
        policy = request.policy if request.policy is not None else Policy()
        prices = {
            "input": policy.input_price,
            "cache_write": policy.cache_write_price,
            "cache_read": policy.cache_read_price,
        }
        reported_price = (
            None if request.reported is None else _reported_price(request.reported, policy)
        )
        if request.packed is None:
            rows.append(
                RequestCost(
                    request_seq=request.request_seq,
                    format=request.format,
                    model=request.model,
                    tokens=0,
                    input_tokens=0,
                    cache_write_tokens=0,
                    cache_read_tokens=0,
                    price=0.0,
                    prices=prices,
                    reported=request.reported,
                    reported_price=reported_price,
                    note=request.note,
                )
            )
            continue
        key = (request.format, request.model)
        shape = _Shape(request.packed, request.rule)
        total = request.packed.tokens
        plain, write, read, holds = _split(shape, total, previous.get(key), request.rule)
        previous[key] = (shape, holds)
        rows.append(
            RequestCost(
                request_seq=request.request_seq,
                format=request.format,
                model=request.model,
                tokens=total,
                input_tokens=plain,
                cache_write_tokens=write,
                cache_read_tokens=read,
                price=_price(plain, write, read, policy),
                prices=prices,
                reported=request.reported,
                reported_price=reported_price,
            )
        )
    return SessionCost(session=session, requests=tuple(rows), total=_total(rows))


def _total(rows: Sequence[RequestCost]) -> CostTotal:
    estimated = [r for r in rows if not r.note]
    reported = [r for r in rows if r.reported is not None]
    tokens = sum(r.tokens for r in estimated)
    read = sum(r.cache_read_tokens for r in estimated)
    usage = [r.reported for r in reported if r.reported is not None]
    return CostTotal(
        requests=len(estimated),
        tokens=tokens,
        input_tokens=sum(r.input_tokens for r in estimated),
        cache_write_tokens=sum(r.cache_write_tokens for r in estimated),
        cache_read_tokens=read,
        price=round(sum(r.price for r in estimated), 9),
        cached_share=round(read / tokens, 6) if tokens else 0.0,
        reported_requests=len(reported),
        reported=Usage(
            input_tokens=sum(u.input_tokens for u in usage),
            output_tokens=sum(u.output_tokens for u in usage),
            cache_read_tokens=sum(u.cache_read_tokens for u in usage),
            cache_write_tokens=sum(u.cache_write_tokens for u in usage),
            reasoning_tokens=sum(u.reasoning_tokens for u in usage),
        ),
        reported_price=round(sum(r.reported_price or 0.0 for r in reported), 9),
    )
