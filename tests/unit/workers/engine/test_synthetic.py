"""The synthetic backend: deterministic replies, honest counts, a simulated prefix cache."""

from __future__ import annotations

from dataclasses import replace

from parley.settings import from_env
from workers.engine import protocol
from workers.engine.protocol import GenerateInput, Progress, Sampling
from workers.engine.settings import EngineSettings
from workers.engine.synthetic import SCRIPT_END, SyntheticBackend, scripted_pieces, synthetic_pieces
from workers.engine.tokenizer import WordTokenizer


def backend(**kw: object) -> SyntheticBackend:
    base = replace(from_env(EngineSettings, {}), backend="synthetic", synthetic_ttft_ms=0.0, synthetic_tokens_per_s=10_000.0)
    return SyntheticBackend(replace(base, **kw))


async def finish(b: SyntheticBackend, rid: str, text: str, n: int, **sampling: object) -> list[Progress]:
    state = b.submit(GenerateInput(rid, text, Sampling(max_new_tokens=n, **sampling), True))  # type: ignore[arg-type]
    return [p async for p in state.progress()]


def test_replies_are_a_pure_function_of_the_prompt() -> None:
    assert synthetic_pieces("hi", 20) == synthetic_pieces("hi", 20)
    assert synthetic_pieces("hi", 20) != synthetic_pieces("ho", 20)
    assert len(synthetic_pieces("hi", 37)) == 37


async def test_counts_and_text_in_deltas() -> None:
    b = backend()
    await b.start()
    prompt = "Tell me about the sea, please."
    steps = await finish(b, "a", prompt, 12)
    last = protocol.joined(steps)
    assert last.finish_reason == protocol.finish_length(12)
    assert last.prompt_tokens == len(WordTokenizer().pieces(prompt))
    assert len(last.output_ids) == last.completion_tokens == 12
    assert last.text == "".join(synthetic_pieces(prompt, 12))
    # Each step carries only what it added: the counts grow by its ids.
    assert all(b2.completion_tokens - a.completion_tokens == len(b2.output_ids) for a, b2 in zip(steps, steps[1:]))


async def test_repeated_prefix_is_reported_cached() -> None:
    b = backend()
    await b.start()
    first = protocol.joined(await finish(b, "a", "System prompt here. First question?", 4))
    second = protocol.joined(await finish(b, "b", "System prompt here. Second question?", 4))
    assert first.cached_tokens == 0
    assert second.cached_tokens == len(WordTokenizer().pieces("System prompt here."))
    assert 0 < b.load().cache_hit_rate < 1


async def test_stop_and_abort() -> None:
    b = backend(synthetic_tokens_per_s=50.0)
    await b.start()
    reply = "".join(synthetic_pieces("q", 30))
    stop = reply.split(" ")[5]
    stopped = protocol.joined(await finish(b, "s", "q", 30, stop=(stop,)))
    assert stopped.finish_reason == protocol.finish_stop_str(stop) and stop not in stopped.text
    state = b.submit(GenerateInput("x", "q", Sampling(max_new_tokens=1000), True))
    stream = state.progress()
    await stream.__anext__()
    b.abort("x")
    last = protocol.joined([p async for p in stream])
    assert last.finish_reason == protocol.finish_abort() and last.completion_tokens < 1000
    await b.stop()


async def test_the_next_turn_finds_the_previous_reply_cached_too() -> None:
    """A radix cache holds prompt and reply: the next turn (prompt + reply + more) hits all of it."""
    b = backend()
    await b.start()
    prompt = "<|im_start|>user\nFirst question?<|im_end|>\n<|im_start|>assistant\n"
    reply = (await finish(b, "a", prompt, 8))[-1].text
    follow = prompt + reply + "<|im_end|>\n<|im_start|>user\nAnd then?<|im_end|>\n"
    second = (await finish(b, "b", follow, 4))[-1]
    assert second.cached_tokens >= len(WordTokenizer().pieces(prompt + reply)) - 1


def test_a_prompt_scripts_a_sentence_into_the_reply_after_n_pieces() -> None:
    import base64

    script = base64.urlsafe_b64encode(b"The scripted sentence.").decode()
    pieces = synthetic_pieces(f"q [[insert:5:{script}]]", 40)
    assert len(pieces) == 40
    assert "".join(pieces[5:8]) == " The scripted sentence."
    assert pieces[:5] == synthetic_pieces(f"q [[insert:5:{script}]]", 5)
    assert synthetic_pieces("q [[insert:5:%%%]]", 10) == synthetic_pieces("q [[insert:5:%%%]]", 10)  # not a script


async def test_a_prompt_scripts_the_whole_reply_which_then_ends_on_its_own() -> None:
    """``[[reply:BASE64]]`` (test-only, this backend's): the reply is the text, whitespace kept, then stop."""
    import base64

    text = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    script = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    assert "".join(scripted_pieces(f"a [[reply:{script}]]") or []) == text
    assert scripted_pieces("no script here") is None
    resumed = f"a [[reply:{script}]]<|im_start|>assistant\n{text[:7]}"  # a resumed attempt: its text so far ends the prompt
    assert "".join(scripted_pieces(resumed) or []) == text[7:]
    last = base64.urlsafe_b64encode(b"The answer.").decode()
    assert "".join(scripted_pieces(f"[[reply:{script}]] then [[reply:{last}]]") or []) == "The answer."  # the last wins
    b = backend()
    await b.start()
    last = protocol.joined(await finish(b, "s1", f"q [[reply:{script}]]", 500))
    assert last.text == text and last.finish_reason == protocol.finish_stop_token(SCRIPT_END)
    capped = protocol.joined(await finish(b, "s2", f"q [[reply:{script}]]", 2))  # the cap still cuts it
    assert capped.finish_reason == protocol.finish_length(2)
