"""The I/O-free core: canonical JSON, fingerprints, codecs, keys, the claim rules."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import inspect
import math
import uuid
from decimal import Decimal
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mideng.core.canonical import canonical_bytes, fingerprint
from mideng.core.codec import JsonCodec, get_codec
from mideng.core.decide import decide
from mideng.core.keys import check_key, compile_template, fast_binder, plain_field, render
from mideng.core.policy import Policy
from mideng.core.record import ClaimRequest, ExpiryPolicy, Outcome, Record, Status
from mideng.errors import CodecError, ConfigurationError, InvalidKeyError, KeyMissingError


class Kind(enum.Enum):
    A = 1


@dataclasses.dataclass(frozen=True)
class Item:
    sku: str
    price: Decimal
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Order:
    id: uuid.UUID
    at: dt.datetime
    items: list[Item]
    kind: Kind
    by_sku: dict[str, int]
    note: str | None = None


class Model(pydantic.BaseModel):
    order: Order
    when: dt.date


def test_canonical_ignores_key_order_and_spelling() -> None:
    assert canonical_bytes({"b": 1, "a": [1, 2]}) == canonical_bytes({"a": [1, 2], "b": 1})
    assert fingerprint({"x": {1, 2, 3}}) == fingerprint({"x": {3, 2, 1}})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    assert canonical_bytes({"é": "ü"}) == '{"é":"ü"}'.encode()


def test_canonical_refuses_what_json_cannot_say() -> None:
    for bad in (math.nan, math.inf, Decimal("NaN"), object()):
        with pytest.raises(TypeError):
            canonical_bytes({"v": bad})


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_fingerprint_is_stable_under_reordering(value: Any) -> None:
    def reverse(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: reverse(v[k]) for k in reversed(list(v))}
        if isinstance(v, list):
            return [reverse(x) for x in v]
        return v

    assert fingerprint(value) == fingerprint(reverse(value))


def test_json_codec_round_trips_declared_types() -> None:
    order = Order(
        uuid.uuid4(),
        dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.timezone.utc),
        [Item("a", Decimal("1.10"), ("x",))],
        Kind.A,
        {"a": 1},
    )
    codec = JsonCodec()
    assert codec.decode(codec.encode(order), Order) == order
    model = Model(order=order, when=dt.date(2026, 5, 2))
    assert codec.decode(codec.encode(model), Model) == model
    assert codec.decode(codec.encode([order]), list[Order]) == [order]
    assert codec.decode(codec.encode(None), Order | None) is None
    assert codec.decode(codec.encode({"k": order}), dict[str, Order]) == {"k": order}
    assert codec.decode(codec.encode((1, "a")), tuple[int, str]) == (1, "a")
    assert codec.decode(codec.encode(b"\x00\xff"), bytes) == b"\x00\xff"
    assert codec.decode(codec.encode({"plain": 1})) == {"plain": 1}


def test_json_codec_errors_are_clear() -> None:
    codec = JsonCodec()
    with pytest.raises(CodecError, match="cannot store the result as JSON"):
        codec.encode(object())
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(CodecError, match="cannot store the result as JSON"):
        codec.encode({"a": circular})
    with pytest.raises(CodecError, match="cannot store the result as JSON"):
        codec.encode({"a": math.nan})
    with pytest.raises(CodecError, match="does not fit"):
        codec.decode(b'"text"', int)
    with pytest.raises(CodecError, match="not valid JSON"):
        codec.decode(b"{", None)
    with pytest.raises(ConfigurationError, match="unknown codec"):
        get_codec("yaml")


def test_containers_of_plain_json_types_are_checked_not_rebuilt() -> None:
    codec = JsonCodec()
    assert codec.decode(b'{"a":"x","b":"y"}', dict[str, str]) == {"a": "x", "b": "y"}
    assert codec.decode(b'{"a":1}', dict[str, int]) == {"a": 1}
    assert codec.decode(b'{"a":[1]}', dict[str, Any]) == {"a": [1]}
    assert codec.decode(b'["x","y"]', list[str]) == ["x", "y"]
    assert codec.decode(b'["x","y"]', set[str]) == {"x", "y"}
    for data, hint in [
        (b'{"a":1}', dict[str, str]),
        (b'{"a":"x"}', dict[str, int]),
        (b'["x",1]', list[str]),
        (b'"x"', dict[str, str]),
        (b"[1]", frozenset[str]),
    ]:
        with pytest.raises(CodecError, match="does not fit"):
            codec.decode(data, hint)


class Color(str, enum.Enum):
    RED = "red"


def test_dict_keys_come_back_as_their_declared_type() -> None:
    # JSON object keys are strings: {1: "a"} is stored as {"1": "a"} and must replay as {1: "a"}.
    codec = JsonCodec()
    cases: list[tuple[Any, dict[Any, Any]]] = [
        (dict[int, str], {1: "a", -2: "b"}),
        (dict[bool, int], {True: 1, False: 0}),
        (dict[float, str], {1.5: "x"}),
        (dict[Kind, int], {Kind.A: 1}),
        (dict[Color, int], {Color.RED: 1}),
        (dict[uuid.UUID, int], {uuid.UUID(int=5): 1}),
        (dict[Decimal, str], {Decimal("0.1"): "exact, not the float 0.1"}),
        (dict[dt.date, int], {dt.date(2026, 1, 1): 3}),
        (dict[tuple[int, int], str], {(1, 2): "a"}),
        (dict[int, list[Item]], {7: [Item("a", Decimal("1.10"))]}),
    ]
    for hint, value in cases:
        replayed = codec.decode(codec.encode(value), hint)
        assert replayed == value, hint
        assert [type(k) for k in replayed] == [type(k) for k in value], hint
    with pytest.raises(CodecError, match="does not fit"):
        codec.decode(b'{"x":1}', dict[int, int])


def test_json_decoding_matches_json_loads_at_the_edges() -> None:
    codec = JsonCodec()
    assert codec.decode(b' {"a": 1} \n') == {"a": 1}
    assert codec.decode(b"[1,2]") == [1, 2]
    assert codec.decode(b"7") == 7
    for bad in (b"", b"1 2", b'{"a":', b"nul", b"\xff"):
        with pytest.raises(CodecError, match="not valid JSON"):
            codec.decode(bad)


def test_key_templates_read_bound_arguments() -> None:
    @dataclasses.dataclass
    class Notify:
        trade_no: str

    args = {"notify": Notify("T1"), "items": ["a", "b"]}
    assert render("{notify.trade_no}", args) == "T1"
    assert render("order:{items[1]}", args) == "order:b"
    assert render(lambda items: f"x{len(items)}", args) == "x2"
    assert render(None, args).startswith("sha256:")
    with pytest.raises(KeyMissingError):
        render("{notify.missing}", args)
    with pytest.raises(KeyMissingError):
        render(None, {"conn": object()})


def test_a_one_argument_template_renders_as_the_general_walk_does() -> None:
    plain, walked = compile_template("{n}"), compile_template("{n!s:}")
    for value in ("T1", 5, 2.5, Decimal("1.10"), uuid.UUID(int=1)):
        assert plain({"n": value}) == walked({"n": value}) == format(value, "")
    with pytest.raises(KeyMissingError, match="could not be rendered"):
        plain({"m": 1})


def test_only_a_bare_one_argument_template_is_plain() -> None:
    assert plain_field("{trade_no}") == "trade_no"
    for other in ("k-{n}", "{n}-{m}", "{n.id}", "{n[0]}", "{n!r}", "{n:>5}", "text", "{n}x"):
        assert plain_field(other) is None, other


def test_binding_all_arguments_by_position_matches_inspect() -> None:
    def body(a: int, b: int = 2, *, c: int = 3) -> None: ...

    def plain(a: int, b: int) -> None: ...

    for fn, args, kwargs in [
        (plain, (1, 2), {}),
        (plain, (1,), {"b": 2}),
        (body, (1,), {}),
        (body, (1, 5), {"c": 4}),
    ]:
        signature = inspect.signature(fn)
        expected = signature.bind(*args, **kwargs)
        expected.apply_defaults()
        assert fast_binder(signature)(args, kwargs) == expected.arguments
    with pytest.raises(TypeError):
        fast_binder(inspect.signature(plain))((1, 2, 3), {})


@pytest.mark.parametrize("bad", ["", None, "x" * 256, 1.5, b"k", "a\x00b"])
def test_bad_keys_are_refused(bad: object) -> None:
    with pytest.raises(InvalidKeyError):
        check_key(bad)


def test_a_nul_in_a_scope_is_refused() -> None:
    from mideng.core.keys import check_scope

    assert check_scope("pay:v2") == "pay:v2"
    with pytest.raises(InvalidKeyError, match="NUL"):
        check_scope("pay\x00")


# "\ud83d\ude00" is a UTF-16 pair left as two code points, not the emoji they would make.
@pytest.mark.parametrize(
    "bad", ["order-\ud800", "\udcff", "a\udfffb", "订单\ud83d", "\ud83d\ude00"]
)
def test_a_lone_surrogate_is_refused_in_keys_scopes_and_entry_scopes(bad: str) -> None:
    from mideng.core.keys import check_entry_scope, check_scope, check_text

    for check in (check_key, check_scope, check_entry_scope):
        with pytest.raises(InvalidKeyError, match="lone surrogate"):
            check(bad)
    with pytest.raises(InvalidKeyError, match="lone surrogate"):
        check_text(bad, "debounce key")


@pytest.mark.parametrize("good", ["订单-123", "\U0001f4b3\U0001f600", "café", "x"])
def test_non_ascii_text_is_a_valid_key_and_scope(good: str) -> None:
    from mideng.core.keys import check_entry_scope, check_scope

    assert check_key(good) == good
    assert check_scope(good) == good
    assert check_entry_scope(good) == good


@pytest.mark.parametrize(
    ("scope", "reserved_for"),
    [("token:formX", "TokenService"), ("token:", "TokenService"), ("hit:debounce", "Debouncer")],
)
def test_a_guarded_scope_may_not_start_with_a_reserved_prefix(
    scope: str, reserved_for: str
) -> None:
    from mideng.core.keys import check_entry_scope, check_scope

    with pytest.raises(InvalidKeyError, match=rf"starts with '\w+:'.*reserved.*{reserved_for}"):
        check_scope(scope)
    # The entry-layer primitives take any name: the store adds the prefix to it.
    assert check_entry_scope(scope) == scope


@pytest.mark.parametrize(
    "scope", ["token", "tokens:x", "hits:x", "my-token:x", "Token:x", "http:u1"]
)
def test_names_near_the_reserved_prefixes_are_guarded_scopes(scope: str) -> None:
    from mideng.core.keys import check_scope

    assert check_scope(scope) == scope


def test_scopes_that_passed_are_remembered_within_a_bound() -> None:
    from mideng.core import keys

    for bad in ["token:x", "pay\udcff", "pay\x00"]:
        for _ in range(2):  # a refusal is never remembered as a pass
            with pytest.raises(InvalidKeyError):
                keys.check_scope(bad)

    class Sly(str):
        pass

    keys.check_scope(Sly("sly-scope"))
    assert "sly-scope" not in keys._PASSED
    for i in range(keys._MAX_PASSED + 10):
        assert keys.check_scope(f"http:user-{i}") == f"http:user-{i}"
    assert 0 < len(keys._PASSED) <= keys._MAX_PASSED


def test_policy_validation() -> None:
    with pytest.raises(ConfigurationError):
        Policy(lease=0)
    with pytest.raises(ConfigurationError):
        Policy(on_error="swallow")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown option"):
        Policy().merged(leese=3)
    assert Policy().merged(lease=5).lease == 5


def _req(**kw: Any) -> ClaimRequest:
    base: dict[str, Any] = {"scope": "s", "key": "k", "owner": "o2", "lease": 10, "ttl": 100}
    base.update(kw)
    return ClaimRequest(**base)


def _rec(**kw: Any) -> Record:
    base: dict[str, Any] = {
        "scope": "s",
        "key": "k",
        "status": Status.PROCESSING,
        "fence": 3,
        "owner": "o1",
        "lease_until": 50.0,
        "expires_at": 500.0,
    }
    base.update(kw)
    return Record(**base)


@pytest.mark.parametrize(
    ("current", "req", "now", "outcome", "writes"),
    [
        (None, _req(), 0.0, Outcome.ACQUIRED, True),
        (_rec(), _req(), 10.0, Outcome.IN_PROGRESS, False),
        (_rec(), _req(), 60.0, Outcome.ACQUIRED, True),
        (_rec(), _req(on_expiry=ExpiryPolicy.UNKNOWN), 60.0, Outcome.UNRESOLVED, True),
        (_rec(status=Status.UNKNOWN, lease_until=None), _req(), 60.0, Outcome.UNRESOLVED, False),
        (
            _rec(status=Status.SUCCEEDED, result=b"1", codec="json"),
            _req(),
            60.0,
            Outcome.REPLAY,
            False,
        ),
        (
            _rec(status=Status.SUCCEEDED, fingerprint="a"),
            _req(fingerprint="b"),
            1.0,
            Outcome.MISMATCH,
            False,
        ),
        (_rec(status=Status.FAILED, error=b"{}"), _req(), 1.0, Outcome.REPLAY, False),
        (_rec(status=Status.FAILED, error=None), _req(), 1.0, Outcome.ACQUIRED, True),
        (_rec(status=Status.SUCCEEDED), _req(), 600.0, Outcome.ACQUIRED, True),
    ],
)
def test_claim_rules(
    current: Record | None, req: ClaimRequest, now: float, outcome: Outcome, writes: bool
) -> None:
    claim, write = decide(current, req, now)
    assert claim.outcome is outcome
    assert write is writes
    if outcome is Outcome.ACQUIRED:
        assert claim.record.owner == req.owner
        assert claim.record.fence == (current.fence + 1 if current else 1)
        assert claim.record.lease_until == now + req.lease


def test_unknown_policy_processing_records_never_expire() -> None:
    claim, _ = decide(None, _req(on_expiry=ExpiryPolicy.UNKNOWN), 0.0)
    assert claim.record.expires_at is None
    claim, _ = decide(None, _req(), 0.0)
    assert claim.record.expires_at == 0.0 + 10 + 100
