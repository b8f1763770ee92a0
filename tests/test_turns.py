import pytest

from optictx import Memory, Turn
from optictx.turns import to_turn


def test_openai_dict_round_trip_keeps_tool_calls():
    msg = {"role": "assistant", "content": None,
           "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    t = to_turn(msg)
    assert t.tool_calls[0].function.arguments == '{"a": 1}'
    assert t.to_openai() == msg


def test_sdk_extras_are_kept_in_metadata_or_dropped_when_none():
    t = to_turn({"role": "assistant", "content": "hi", "refusal": None, "audio": {"id": "a1"}})
    assert t.metadata == {"extra": {"audio": {"id": "a1"}}}


def test_structured_arguments_are_dumped_to_json_text():
    t = to_turn({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"x": [1]}}}]})
    assert t.tool_calls[0].function.arguments == '{"x": [1]}'


def test_content_parts_give_text_with_placeholders():
    t = to_turn({"role": "user", "content": [{"type": "text", "text": "see"},
                                             {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]})
    assert t.text == "see\n[image]"


@pytest.mark.parametrize(
    ("msg", "exc", "words"),
    [
        ({"role": "robot", "content": "x"}, ValueError, "valid roles"),
        ({"role": "tool", "content": "x"}, ValueError, "tool_call_id"),
        ({"role": "user", "content": 42}, TypeError, "content must be"),
        ({"role": "user", "content": [{"text": "no type"}]}, TypeError, "content part 0"),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, ValueError, "only valid on tool"),
        ({"role": "tool", "tool_call_id": "c", "content": "x", "pinned": True}, ValueError, "cannot be pinned"),
        ("just a string", TypeError, "must be a Turn or a dict"),
    ],
)
def test_invalid_turns_raise_clear_errors(msg, exc, words):
    with pytest.raises(exc, match=words):
        Memory().add(msg)


def test_add_returns_stored_turn_with_unique_increasing_ids():
    mem = Memory()
    ids = [mem.add({"role": "user", "content": str(i)}).id for i in range(5)]
    assert ids == [0, 1, 2, 3, 4]
    assert [t.id for t in mem.transcript()] == ids
    assert isinstance(mem.add(Turn(role="user", content="x")), Turn)


def test_pin_refused_on_tool_turns():
    mem = Memory()
    with pytest.raises(ValueError, match="cannot be pinned"):
        mem.add({"role": "tool", "tool_call_id": "c", "content": "r"}, pin=True)
    assert mem.add({"role": "user", "content": "keep"}, pin=True).pinned
