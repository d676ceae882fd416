"""`parley chat`: a terminal client that streams replies as they are generated."""

from __future__ import annotations

import sys

from tools.client import ApiError, ParleyClient


async def chat(url: str, key: str, conversation_id: str | None, message: str | None) -> None:
    client = ParleyClient(url, key)
    try:
        if conversation_id is None:
            conversation_id = await client.create_conversation()
            print(f"(conversation {conversation_id})", file=sys.stderr)
        while True:
            text = message if message is not None else _ask()
            if text is None:
                return
            await _turn(client, conversation_id, text)
            if message is not None:
                return
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        await client.close()


def _ask() -> str | None:
    try:
        text = input("you> ").strip()
    except EOFError:
        return None
    return text or _ask()


async def _turn(client: ParleyClient, conversation_id: str, text: str) -> None:
    sys.stdout.write("parley> ")
    shown = ""
    async for event in client.stream_message(conversation_id, text):
        if event.event == "delta":
            shown += event.data["text"]
            sys.stdout.write(event.data["text"])
            sys.stdout.flush()
        elif event.event == "restarted":
            # A terminal cannot take text back: say so and write the reply again from what is kept.
            shown = shown[: int(event.data.get("offset_chars", 0))]
            print("\n(the worker was replaced; the reply continues)", file=sys.stderr)
            sys.stdout.write("parley> " + shown)
            sys.stdout.flush()
        elif event.event == "done":
            usage = event.data.get("usage", {})
            print(f"\n({event.data['finish_reason']}, {usage.get('completion_tokens', 0)} tokens)", file=sys.stderr)
        elif event.event == "error":
            print(f"\nerror: {event.data.get('code')}: {event.data.get('message')}", file=sys.stderr)
