"""Rename, archive, delete, search a conversation, through the API, on the shared stack."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.e2e.test_chat_turn import _settled
from tools.client import ApiError


async def test_rename_archive_and_delete_show_at_once_on_every_read_path(stack) -> None:
    client = stack.client(stack.new_key("plus"))
    try:
        cid = await client.create_conversation()
        reply = await client.send(cid, "Hello there.")
        assert reply.final is not None and reply.final.event == "done"
        reply_id = reply.head["reply_id"]
        await _settled(client, cid, 1)
        other = await client.create_conversation("kept")

        assert await client.update_conversation(cid, title="Greetings") == {"id": cid, "title": "Greetings", "archived": False}
        assert (await client.conversation(cid))["title"] == "Greetings"
        assert {c["id"]: c["title"] for c in await client.conversations()}[cid] == "Greetings"

        await client.update_conversation(cid, archived=True)
        assert cid not in {c["id"] for c in await client.conversations()}
        assert [c["id"] for c in await client.conversations(archived=True)] == [cid]
        assert (await client.conversation(cid))["title"] == "Greetings"  # archived, not gone
        await client.update_conversation(cid, archived=False)
        assert cid in {c["id"] for c in await client.conversations()}

        await client.delete_conversation(cid)
        with pytest.raises(ApiError) as gone:
            await client.conversation(cid)
        assert gone.value.status == 404
        assert {c["id"] for c in await client.conversations()} == {other}
        assert await client.conversations(archived=True) == []
        with pytest.raises(ApiError) as posting:
            await client.send(cid, "Still there?")
        assert posting.value.status == 404
        for path in (f"/v1/messages/{reply_id}/stream", f"/v1/messages/{reply_id}/regenerate"):
            method = "GET" if path.endswith("stream") else "POST"
            response = await client._http.request(method, path, json=None if method == "GET" else {"client_message_id": "x"})
            assert response.status_code == 404, path
        with pytest.raises(ApiError) as again:
            await client.delete_conversation(cid)
        assert again.value.status == 404
    finally:
        await client.close()


async def test_bad_changes_are_refused_by_name(stack) -> None:
    client = stack.client()
    try:
        cid = await client.create_conversation()
        for body in ({}, {"color": "red"}, {"archived": "yes"}, {"title": " "}):
            response = await client._http.patch(f"/v1/conversations/{cid}", json=body)
            assert response.status_code == 422, body
            assert response.json()["error"]["message"]
        response = await client._http.get("/v1/conversations", params={"archived": "maybe"})
        assert response.status_code == 422
    finally:
        await client.close()


async def test_a_reply_is_rated_and_the_rating_taken_back_by_its_owner_alone(stack) -> None:
    """PUT/DELETE .../messages/{id}/feedback (gateway/feedback.py): the rating shows at once on the reply,
    the last one stands, hostile values are refused by name, and nobody else reaches it."""
    client, stranger = stack.client(stack.new_key("plus")), stack.client()
    try:
        cid = await client.create_conversation()
        reply = await client.send(cid, "Hello there.")
        assert reply.final is not None and reply.final.event == "done"
        reply_id, question_id = reply.head["reply_id"], reply.head["user_message_id"]
        await _settled(client, cid, 1)
        path = f"/v1/conversations/{cid}/messages/{reply_id}/feedback"

        async def shown() -> object:
            return {m["id"]: m.get("feedback") for m in (await client.conversation(cid))["messages"]}[reply_id]

        rated = await client._http.put(path, json={"rating": "down", "reason": "Too vague."})
        assert (rated.status_code, rated.json()) == (200, {"message_id": reply_id, "rating": "down", "reason": "Too vague."})
        assert await shown() == {"rating": "down", "reason": "Too vague."}
        assert (await client._http.put(path, json={"rating": "up"})).status_code == 200
        assert await shown() == {"rating": "up", "reason": ""}  # the last rating stands, with its own reason

        for body, status, code in (
            ({"rating": "meh"}, 422, "invalid_rating"),
            ({"rating": "up", "stars": 5}, 422, None),
            ({}, 422, "missing_field"),
            ({"rating": "up", "reason": "x" * 501}, 413, None),
        ):
            refused = await client._http.put(path, json=body)
            assert refused.status_code == status, body
            assert code is None or refused.json()["error"]["code"] == code
        for other, status in ((question_id, 422), ("00000000-0000-4000-8000-000000000000", 404), ("not-an-id", 404)):
            refused = await client._http.put(f"/v1/conversations/{cid}/messages/{other}/feedback", json={"rating": "up"})
            assert refused.status_code == status, other
        assert (await stranger._http.put(path, json={"rating": "down"})).status_code == 404
        assert (await stranger._http.delete(path)).status_code == 404
        assert await shown() == {"rating": "up", "reason": ""}  # nothing they sent reached it

        assert (await client._http.delete(path)).status_code == 204
        assert await shown() is None
    finally:
        await client.close()
        await stranger.close()


async def test_a_conversation_exports_whole_and_the_account_as_a_zip_on_the_web_session_alone(stack) -> None:
    """GET /v1/conversations/{id}/export (JSON, Markdown) and GET /v1/me/export (gateway/export.py)."""
    import io
    import json
    import zipfile

    user_id, key = stack.inner.create_user("exporter", "plus")
    client, web, stranger = stack.client(key), stack.web_client(user_id), stack.client()
    try:
        cid = await client.create_conversation("Trip")
        for text, parent in (("Plan a day in Lisbon.", ...), ("Plan a day in Porto.", None)):  # the second: an edit
            reply = await client.send(cid, text, parent_id=parent)
            assert reply.final is not None and reply.final.event == "done"
        shown = await _settled(client, cid, 2)
        path = f"/v1/conversations/{cid}/export"

        exported = await client._http.get(path)
        assert exported.status_code == 200 and "attachment" in exported.headers["content-disposition"]
        doc = exported.json()
        assert (doc["format"], doc["id"], doc["title"], doc["selected_leaf_id"]) == ("parley.conversation/1", cid, "Trip", shown["selected_leaf_id"])
        assert {(m["id"], m["parent_id"], m["role"]) for m in doc["messages"]} == {(m["id"], m["parent_id"], m["role"]) for m in shown["messages"]}
        assert sum(m["parent_id"] is None for m in doc["messages"]) == 2  # both versions of the first message

        text = (await client._http.get(path, params={"format": "markdown"})).text
        assert text.startswith("# Trip") and "Lisbon" in text and "Porto" in text
        assert "version 1 of 2" in text and "version 2 of 2" in text and text.count(" ★\n") == 2  # the edit and its reply

        assert (await client._http.get(path, params={"format": "pdf"})).status_code == 422
        assert (await stranger._http.get(path)).status_code == 404

        refused = await client._http.get("/v1/me/export")  # a key is for chatting: not the whole account
        assert (refused.status_code, refused.json()["error"]["code"]) == (403, "insufficient_scope")
        account = await web._http.get("/v1/me/export")
        assert account.status_code == 200 and account.headers["content-type"] == "application/zip"
        files = zipfile.ZipFile(io.BytesIO(account.content))
        names = set(files.namelist())
        assert {"parley-export/profile.json", "parley-export/memory.json", "parley-export/documents.json", f"parley-export/conversations/{cid}.json"} <= names
        assert json.loads(files.read(f"parley-export/conversations/{cid}.json"))["messages"] == doc["messages"]
        assert json.loads(files.read("parley-export/profile.json"))["user"]["id"] == user_id
    finally:
        for c in (client, web, stranger):
            await c.close()


async def test_search_finds_a_word_from_the_middle_and_a_typo_never_a_deleted_or_anothers_conversation(stack) -> None:
    client, other = stack.client(stack.new_key("plus")), stack.client(stack.new_key("plus"))
    word = "zq" + uuid.uuid4().hex[:6].translate(str.maketrans("0123456789", "ghijklmnop"))  # a word no other test writes
    try:
        cid = await client.create_conversation()
        await client.send(cid, f"Yesterday the orchard {word} harvest was late again.")
        deadline = time.monotonic() + 30  # the search processor indexes from the log, a moment behind
        while not (found := await client.search(word)):
            assert time.monotonic() < deadline, "the message was never searchable"
            await asyncio.sleep(0.2)
        assert [(r["conversation_id"], r["role"]) for r in found] == [(cid, "user")]
        assert word in found[0]["snippet"] and found[0]["message_id"]
        typo = word[:3] + word[4] + word[3] + word[5:]  # two neighbours swapped
        assert [r["conversation_id"] for r in await client.search(typo + " harvest")] == [cid]
        assert [r["conversation_id"] for r in await client.search(word[:5])] == [cid]  # still typing
        assert await other.search(word) == []  # another user's index never meets it

        with pytest.raises(ApiError) as empty:
            await client.search("")
        assert empty.value.status == 422 and word not in str(empty.value)
        with pytest.raises(ApiError) as long:
            await client.search(word * 40)
        assert long.value.status == 413 and word not in str(long.value)
        for limit in ("0", "51", "²", "9" * 5000, "-1"):  # a digit int() refuses is a 422 too, never a 500
            refused = await client._http.get("/v1/search", params={"q": word, "limit": limit})
            assert (refused.status_code, refused.json()["error"]["code"]) == (422, "invalid_limit"), limit

        await client.delete_conversation(cid)
        assert await client.search(word) == []  # at once: the query checks the deleted mark
    finally:
        await client.close()
        await other.close()


async def test_a_chatgpt_export_imports_once_whole_and_a_malformed_one_not_at_all(stack) -> None:
    """POST /v1/imports (gateway/imports.py): every branch and the selected leaf kept, the same file twice one copy,
    a file with one bad node refused whole, Parley's own export imported back, the conversation continued."""
    import copy
    import io
    import json
    import zipfile
    from pathlib import Path

    chatgpt = json.loads((Path(__file__).parents[1] / "fixtures" / "imports" / "chatgpt_conversations.json").read_text())
    client, stranger = stack.client(stack.new_key("plus")), stack.client()
    try:
        broken = copy.deepcopy(chatgpt)
        broken[1]["mapping"]["ans"]["parent"] = "nowhere"  # the first conversation is fine: nothing may land anyway
        refused = await client._http.post("/v1/imports", json=broken)
        assert refused.status_code == 422, refused.text
        assert (refused.json()["error"]["code"], "[1].mapping.ans.parent" in refused.json()["error"]["message"]) == ("invalid_export", True)
        assert await client.conversations() == [] and await client.conversations(archived=True) == []

        first = await client._http.post("/v1/imports", json=chatgpt)
        assert first.status_code == 201, first.text
        assert (first.json()["imported"], first.json()["unchanged"]) == (2, 0)
        trip_id, bread_id = (c["id"] for c in first.json()["conversations"])
        trip = await client.conversation(trip_id)
        assert trip["title"] == "Trip to Lisbon" and len(trip["messages"]) == 5
        by_id = {m["id"]: m for m in trip["messages"]}
        branch, leaf = [], trip["selected_leaf_id"]
        while leaf is not None:
            branch.append(by_id[leaf]["content"])
            leaf = by_id[leaf]["parent_id"]
        assert branch[::-1] == [
            "Plan three days in Lisbon with a tram ride",
            "Regenerated: start in Belem, then tram 28 to Graca.",
            "What is this tile pattern called?",
            "Those are azulejos, in a pattern called padrao.",
        ]
        assert trip["messages"][0]["created_at"].startswith("2024-05-29")  # the original time
        assert [c["id"] for c in await client.conversations(archived=True)] == [bread_id]

        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as z:  # ChatGPT's download, as it comes
            z.writestr("export/conversations.json", json.dumps(chatgpt))
        again = await client._http.post("/v1/imports", content=archive.getvalue(), headers={"content-type": "application/zip"})
        assert again.status_code == 200, again.text
        assert (again.json()["imported"], again.json()["unchanged"]) == (0, 2)
        assert [c["id"] for c in await client.conversations()] == [trip_id]
        assert (await client.conversation(trip_id))["messages"] == trip["messages"]

        own = (await client._http.get(f"/v1/conversations/{trip_id}/export")).json()
        copied = await client._http.post("/v1/imports", json=own)
        assert copied.status_code == 201 and copied.json()["conversations"][0]["id"] not in (trip_id, bread_id)
        copy_of = await client.conversation(copied.json()["conversations"][0]["id"])
        assert sorted(m["content"] for m in copy_of["messages"]) == sorted(m["content"] for m in trip["messages"])

        reply = await client.send(trip_id, "And on day two?")  # continues the selected branch: the pipeline takes it on
        assert reply.final is not None and reply.final.event == "done"
        assert (await stranger._http.get(f"/v1/conversations/{trip_id}")).status_code == 404
    finally:
        await client.close()
        await stranger.close()


async def test_a_share_link_shows_its_branch_to_anyone_until_revoked_deleted_or_its_owner_erased(stack) -> None:
    """gateway/shares.py: the link reads without a credential, shows the branch as it was when shared, forks
    into another account once, and answers one 404 after a revocation, the conversation's deletion or the
    owner's erasure; only the owner makes, lists or revokes links."""
    import secrets

    import httpx

    user_id, key = stack.inner.create_user("sharer", "plus")
    client, web, stranger = stack.client(key), stack.web_client(user_id), stack.client()
    anyone = httpx.AsyncClient(base_url=stack.url, timeout=30)
    try:
        cid = await client.create_conversation("Shared")
        assert (await client.send(cid, "What is a share link?")).final.event == "done"
        await _settled(client, cid, 1)
        shares = f"/v1/conversations/{cid}/shares"
        for body in ({"expires_in_days": 0}, {"expires_in_days": "7"}, {"expires_in_days": 400}, {"color": "red"}):
            assert (await client._http.post(shares, json=body)).status_code == 422, body
        made = await client._http.post(shares, json={"expires_in_days": 7})
        assert made.status_code == 201, made.text
        link, share_id = made.json()["path"], made.json()["id"]
        secret = link.removeprefix("/s/")
        assert made.json()["expires_at"] is not None

        seen = await anyone.get(f"/v1/shares/{secret}")
        assert seen.status_code == 200 and seen.headers["cache-control"] == "no-store"
        assert [(m["role"], bool(m["content"])) for m in seen.json()["messages"]] == [("user", True), ("assistant", True)]
        assert seen.json()["messages"][0]["content"] == "What is a share link?" and seen.json()["title"] == "Shared"
        page = await anyone.get(link)
        assert page.status_code == 200 and "share.js" in page.text and "default-src 'self'" in page.headers["content-security-policy"]

        assert (await client.send(cid, "A later turn, not shared.")).final.event == "done"
        assert len((await anyone.get(f"/v1/shares/{secret}")).json()["messages"]) == 2  # the branch as it was

        for method, path in (("POST", shares), ("GET", shares), ("DELETE", f"{shares}/{share_id}")):
            assert (await stranger._http.request(method, path)).status_code == 404, (method, path)
        forked = await stranger._http.post(f"/v1/shares/{secret}/fork")
        assert forked.status_code == 201, forked.text
        copy = await stranger.conversation(forked.json()["id"])
        assert [m["content"] for m in copy["messages"]] == [m["content"] for m in seen.json()["messages"]]
        again = await stranger._http.post(f"/v1/shares/{secret}/fork")
        assert (again.status_code, again.json()["id"]) == (200, forked.json()["id"])  # the same link twice: one copy

        assert [s["id"] for s in (await client._http.get(shares)).json()["shares"]] == [share_id]
        assert (await client._http.delete(f"{shares}/{share_id}")).status_code == 204
        gone = await anyone.get(f"/v1/shares/{secret}")
        assert (gone.status_code, gone.json()["error"]["code"]) == (404, "share_not_found")
        assert (await anyone.get(link)).status_code == 404
        assert (await client._http.delete(f"{shares}/{share_id}")).status_code == 404
        assert (await client._http.get(shares)).json()["shares"] == []
        for bad in ("nope", secrets.token_urlsafe(32), "x" * 43):
            assert (await anyone.get(f"/v1/shares/{bad}")).status_code == 404

        second = (await client._http.post(shares, json={})).json()["path"].removeprefix("/s/")
        assert (await anyone.get(f"/v1/shares/{second}")).status_code == 200
        await client.delete_conversation(cid)
        assert (await anyone.get(f"/v1/shares/{second}")).status_code == 404  # deleted: at once

        kept = await client.create_conversation("Kept")
        assert (await client.send(kept, "Still here?")).final.event == "done"
        await _settled(client, kept, 1)
        third = (await client._http.post(f"/v1/conversations/{kept}/shares", json={})).json()["path"].removeprefix("/s/")
        assert (await anyone.get(f"/v1/shares/{third}")).status_code == 200
        assert (await web._http.request("DELETE", "/v1/me", params={"confirm": "true"})).status_code == 202
        assert (await anyone.get(f"/v1/shares/{third}")).status_code == 404  # the owner erased: at once
    finally:
        for c in (client, web, stranger):
            await c.close()
        await anyone.aclose()
