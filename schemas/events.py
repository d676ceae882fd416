"""Every event that crosses a service boundary, one frozen type each.

These classes are the source of the Avro schemas in ``schemas/avro/*.avsc``
(``parley schemas write`` regenerates them; a test fails when they drift). Each
docstring says who produces the event and who consumes it; each field's ``doc``
ends up in the ``.avsc`` so readers in other languages see it too.

Compatibility rule (enforced by ``tests/unit/schemas/test_schema_compat.py``): a new
field must have a default; a field is never removed or retyped. Strings stand in
for enums (``finish_reason``, ``reason``) because adding an Avro enum symbol
breaks old readers; the allowed values are the ``*_VALUES`` sets below.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

NAMESPACE = "parley.events"

FINISH_REASONS = frozenset({"stop", "length", "cancelled", "failed", "rejected", "content_filter"})
CANCEL_REASONS = frozenset({"user", "moderation", "abandoned", "shed"})
ROLES = frozenset({"system", "user", "assistant", "tool"})
#: auto: the model may call a tool; none: it is not offered any; required: it must call one; function: it must
#: call the one named.
TOOL_CHOICES = frozenset({"auto", "none", "required", "function"})
#: Who runs a turn's tools: the client (OpenAI's function calling) or Parley (server-side tools, §13).
TOOL_RUNNERS = frozenset({"client", "parley"})
#: The permission broker's answer for a call (streams/tool_policy.py).
TOOL_DECISIONS = frozenset({"allow", "ask", "deny"})
#: approve: run it as proposed; edit: run it with the user's arguments; reject: do not run it; expire: nobody
#: answered in time (the broker's own clock, ordered on the log like any answer).
TOOL_ANSWERS = frozenset({"approve", "edit", "reject", "expire"})
#: How a call ended. ok/error: the tool answered; denied: the broker refused; rejected: the user did;
#: expired: nobody answered in time; unknown: it was started and nobody can tell whether it took effect.
TOOL_OUTCOMES = frozenset({"ok", "error", "denied", "rejected", "expired", "unknown"})
#: A reply's rating; "" takes it back (FeedbackGiven).
RATINGS = frozenset({"up", "down", ""})
MODERATION_DIRECTIONS = frozenset({"input", "output"})
#: input: the user's message; window: a stretch of the streaming reply; final: the reply's tail on completion.
MODERATION_STAGES = frozenset({"input", "window", "final"})
#: none: clean; cut: the stream was stopped; withdrawn: the reply had ended and is replaced afterwards.
MODERATION_ACTIONS = frozenset({"none", "cut", "withdrawn"})


def doc(text: str, *, sealed: bool = False, **kwargs: Any) -> Any:
    """A dataclass field whose documentation travels into the Avro schema. ``sealed``: it holds a
    user's content, encrypted under the user's data key on the wire (schemas/sealing.py)."""
    return field(metadata={"doc": text, "sealed": True} if sealed else {"doc": text}, **kwargs)


def now_us() -> int:
    return time.time_ns() // 1_000


def new_event_id() -> str:
    return str(uuid.uuid4())


def _check(value: str | None, allowed: frozenset[str], what: str) -> None:
    if value is not None and value not in allowed:
        raise ValueError(f"{what} must be one of {sorted(allowed)}, got {value!r}")


# --------------------------------------------------------------------------- base


@dataclass(frozen=True, kw_only=True)
class Event:
    """Envelope shared by every event."""

    #: The Kafka key field of this event (the topic catalog says which topic).
    key_field: ClassVar[str] = "conversation_id"

    event_id: str = doc("UUID of this event; consumers may dedupe on it", default_factory=new_event_id)
    occurred_at: int = doc("When it happened, microseconds since the Unix epoch (UTC)", default_factory=now_us)
    trace_id: str = doc("Trace id carried from the HTTP request through every event", default="")

    @property
    def key(self) -> bytes:
        return str(getattr(self, self.key_field)).encode()


@dataclass(frozen=True, kw_only=True)
class ConversationEvent(Event):
    """Envelope of every event about one conversation: keyed by its id."""

    conversation_id: str = doc("The conversation; the Kafka key, so its events are totally ordered")
    user_id: str = doc("Owner of the conversation")


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token counts of one generation."""

    prompt_tokens: int = doc("Tokens in the prompt", default=0)
    cached_tokens: int = doc("Prompt tokens served from the engine's prefix cache", default=0)
    completion_tokens: int = doc("Tokens generated", default=0)


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """How one turn's reply is sampled, as the user asked (gateway → context → router → worker → engine).
    None (or empty): the pool's default."""

    temperature: float | None = doc("0 = greedy; up to 2", default=None)
    top_p: float | None = doc("Nucleus sampling mass, (0, 1]", default=None)
    seed: int | None = doc("Seed of the engine's sampler: the same seed and prompt give the same reply", default=None)
    stop: list[str] = doc("Strings that end the reply (not included in it); at most 4", default_factory=list)
    presence_penalty: float | None = doc("-2..2, OpenAI's meaning", default=None)
    frequency_penalty: float | None = doc("-2..2, OpenAI's meaning", default=None)
    json_schema: str | None = doc(
        "A JSON Schema the reply must match (SGLang's structured output; OpenAI's response_format)", default=None
    )
    top_k: int | None = doc("Sample only among the k most likely tokens (>= 1; SGLang's and vLLM's top_k)", default=None)
    min_p: float | None = doc("Drop tokens less likely than min_p times the most likely one, [0, 1]", default=None)
    repetition_penalty: float | None = doc(
        "Divides the logits of tokens already generated, (0, 2]; 1 = none (SGLang's and vLLM's)", default=None
    )
    ignore_eos: bool = doc("Keep generating past the model's end token, to the token cap (benchmarks)", default=False)
    stop_token_ids: list[int] = doc("Token ids that end the reply like the model's end token", default_factory=list)
    min_tokens: int | None = doc(
        "The end token and stop_token_ids are held back until this many tokens (SGLang's min_new_tokens)", default=None
    )


@dataclass(frozen=True, kw_only=True)
class Citation:
    """A passage a reply drew on: where it is, and the span of it the reply used."""

    number: int = doc("1-based, in the order the reply first used them (the [n] the web page shows)")
    document_id: str = doc("The document")
    page: int = doc("1-based page of the document")
    chunk_id: str = doc("The chunk quoted (document_chunks.chunk_id)")
    text: str = doc("The quoted span, from the page's text", sealed=True)
    filename: str = doc("The document's name as uploaded", default="", sealed=True)


CITATION_STATUSES = frozenset({"", "cited", "uncited"})


@dataclass(frozen=True, kw_only=True)
class ToolFunction:
    """A function a client offers the model (OpenAI's ``tools[].function``); the client runs it."""

    name: str = doc("The function's name: letters, digits, _ and -, at most 64")
    description: str = doc("What it does, as the client wrote it", default="", sealed=True)
    parameters: str = doc("Its arguments' JSON Schema, as JSON text ('': none)", default="", sealed=True)
    strict: bool = doc(
        "OpenAI's strict: a call of it must match ``parameters`` exactly (the engine constrains it, tool_choice auto "
        "included: workers/tool_calls.py structural_tag)",
        default=False,
    )


@dataclass(frozen=True, kw_only=True)
class Tools:
    """The tools a turn offers, and whether the model must call one (POST /v1/chat/completions)."""

    functions: list[ToolFunction] = doc("The functions offered, in the client's order", default_factory=list)
    choice: str = doc("auto | none (none offered) | required (one must be called) | function (`function` must be)", default="auto")
    function: str = doc("With choice function: the function the model must call", default="")
    parallel: bool = doc("The model may call several at once (OpenAI's parallel_tool_calls)", default=True)
    runner: str = doc(
        "client: the client runs the calls (OpenAI's function calling); parley: Parley does, through the "
        "permission broker and the executor (DESIGN.md §13)",
        default="client",
    )
    round: int = doc("Server-side tools: how many rounds of calls this turn already had (0: none)", default=0)

    def __post_init__(self) -> None:
        _check(self.choice, TOOL_CHOICES, "choice")
        _check(self.runner, TOOL_RUNNERS, "runner")


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """A call of a client's function, as a reply made it (or a history sent whole holds it)."""

    id: str = doc("call_…: the same for a reply's n-th call in every attempt (workers/tool_calls.py call_id)")
    name: str = doc("The function called")
    arguments: str = doc("Its arguments as JSON text (an object)", default="{}", sealed=True)


# ------------------------------------------------------------------ chat.events


@dataclass(frozen=True, kw_only=True)
class ConversationCreated(ConversationEvent):
    """A user opened a conversation. gateway → materializer."""

    title: str = doc("Display title; may be empty until the first message names it", default="", sealed=True)
    model: str | None = doc("Model the user chose for this conversation, if any", default=None)


@dataclass(frozen=True, kw_only=True)
class MessagePosted(ConversationEvent):
    """A message was accepted: the user's, or one of a history sent whole. gateway → materializer, context builder."""

    message_id: str = doc("uuid5(NS, 'conversation_id:client_message_id'): retries give the same id")
    parent_id: str | None = doc("Message this one answers or follows; null for the first message", default=None)
    client_message_id: str = doc("The client's idempotency key")
    role: str = doc("user | system | assistant | tool (from a history sent to POST /v1/chat/completions)", default="user")
    content: str = doc("Message text (never logged)", sealed=True)
    model: str | None = doc("Model the user selected for this turn, if any", default=None)
    edit_of: str | None = doc("The message this one edits (a sibling under the same parent)", default=None)
    document_ids: list[str] = doc(
        "Documents this message asks about (the owner's, checked by the gateway); a turn uses those of every "
        "user message on its branch",
        default_factory=list,
    )
    tool_calls: list[ToolCall] = doc("An assistant message's tool calls (a history sent whole)", default_factory=list)
    tool_call_id: str = doc("A tool message's: the call whose result it is ('': not a tool message)", default="")

    def __post_init__(self) -> None:
        _check(self.role, ROLES, "role")


@dataclass(frozen=True, kw_only=True)
class ArmOverrides:
    """What an experiment's arm changes in the router for its turns (unset: the router's own settings).
    Only these: `parley experiments start` refuses any other name (streams/experiments.py OVERRIDES)."""

    pool: str = doc("The pool that serves the turn ('': the router's choice), when it serves the turn's model and holds its tokens", default="")
    medium_score: float | None = doc("The classifier's score at or above which a turn needs medium (PARLEY_ROUTER_MEDIUM_SCORE)", default=None)
    frontier_score: float | None = doc("The classifier's score at or above which a turn needs frontier (PARLEY_ROUTER_FRONTIER_SCORE)", default=None)


@dataclass(frozen=True, kw_only=True)
class Assignment:
    """The experiment arm a turn was assigned to, and what the arm changes: the turn carries both, so the
    router applies it without reading ops.experiments and an analyst sees what was applied."""

    experiment: str = doc("The experiment's name")
    arm: str = doc("The arm: hash(experiment, user id) mapped onto the arms' shares (streams/experiments.py)")
    overrides: ArmOverrides = doc("What the arm changes for the turn", default_factory=ArmOverrides)


@dataclass(frozen=True, kw_only=True)
class GenerationRequested(ConversationEvent):
    """An assistant reply was asked for. gateway → context builder, materializer."""

    request_id: str = doc("The assistant message id: uuid5(NS, 'conversation_id:client_message_id:reply')")
    parent_id: str = doc("The user message the reply answers")
    client_message_id: str = doc("Idempotency key of the action that asked (post or regenerate)")
    model: str | None = doc("Model the user selected, if any", default=None)
    tier: str = doc("free | plus | enterprise: admission and routing use it", default="free")
    max_tokens: int | None = doc("Cap on generated tokens; null for the pool's default", default=None)
    sampling: Sampling = doc("How the reply is sampled, as asked", default_factory=Sampling)
    token_offset: int = doc(
        "Offset of chat.tokens, in the conversation's partition, at or before the reply's first chunk; "
        "any gateway replays the reply's stream from it (-1: unknown)",
        default=-1,
    )
    org_id: str = doc(
        "The user's organisation: its moderation policy, where it set one, is the turn's ('': the tier's)", default=""
    )
    as_sent: bool = doc(
        "The prompt is the client's messages as sent (POST /v1/chat/completions): no system prompt, memory, "
        "documents or summary is added and no turn is left out; over every pool's context the turn fails "
        "context_too_long; without max_tokens the reply may run to the end of the pool's context",
        default=False,
    )
    tools: Tools | None = doc("Functions the client offers the model (as-sent turns only); null: none", default=None)
    experiment: Assignment | None = doc(
        "The running experiment's arm the user is in (ops.experiments; the gateway stamps it); null: none", default=None
    )


@dataclass(frozen=True, kw_only=True)
class GenerationCompleted(ConversationEvent):
    """A generation ended, for any reason. worker (or router, when shed) → materializer, context builder."""

    request_id: str = doc("The assistant message id")
    parent_id: str = doc("The user message the reply answers")
    attempt: int = doc("0 for the first attempt; raised on each restart", default=0)
    finish_reason: str = doc("stop | length | cancelled | failed | rejected | content_filter")
    content: str = doc("The whole reply text (partial when cancelled or failed)", default="", sealed=True)
    usage: Usage = doc("Token counts", default_factory=Usage)
    pool: str = doc("Pool that served it (small, medium, frontier)", default="")
    model: str = doc("Model that served it", default="")
    replica: str = doc("Worker id that served it", default="")
    error_code: str | None = doc("Machine-readable cause when failed or rejected", default=None)
    error_message: str | None = doc("Human-readable cause when failed or rejected", default=None)
    citations: list[Citation] = doc("Passages of the turn's documents the reply drew on", default_factory=list)
    citation_status: str = doc(
        "'' (the turn had no documents) | cited | uncited (documents were given and the reply used none)", default=""
    )
    retrieval: Retrieval | None = doc(
        "The turn's document search, without the passages' text (null: the turn had no documents)", default=None
    )
    tool_calls: list[ToolCall] = doc("The client's functions the reply calls (its content is the text around them)", default_factory=list)

    def __post_init__(self) -> None:
        _check(self.finish_reason, FINISH_REASONS, "finish_reason")
        _check(self.citation_status, CITATION_STATUSES, "citation_status")


@dataclass(frozen=True, kw_only=True)
class SummaryWritten(ConversationEvent):
    """The oldest turns of a branch were folded into a summary. context builder → materializer, context builder."""

    summary_id: str = doc("Deterministic id of this summary")
    through_message_id: str = doc("Last message the summary covers (on the branch that ends at it)")
    covered_message_ids: list[str] = doc("Messages folded into the summary, oldest first", default_factory=list)
    content: str = doc("The summary text", sealed=True)
    tokens: int = doc("Its length in the engine's tokens", default=0)
    model: str = doc("Model that wrote it", default="")


@dataclass(frozen=True, kw_only=True)
class LeafSelected(ConversationEvent):
    """The user switched branch. gateway → materializer, context builder."""

    leaf_id: str = doc("Message at the end of the selected branch")


@dataclass(frozen=True, kw_only=True)
class ConversationRenamed(ConversationEvent):
    """The conversation got a new title: the user's, or one written after its first reply. gateway, titler → materializer."""

    title: str = doc("New title", sealed=True)
    by: str = doc("user (a rename) or auto (the titler, after the first reply; never over a user's title)", default="user")


@dataclass(frozen=True, kw_only=True)
class ConversationArchived(ConversationEvent):
    """The user archived the conversation, or brought it back. gateway → materializer."""

    archived: bool = doc("True: listed only among the archived; False: listed again")


@dataclass(frozen=True, kw_only=True)
class FeedbackGiven(ConversationEvent):
    """The user rated a reply, or took the rating back: the last one for a reply stands. gateway →
    materializer, analysts (``parley replay``, ``parley report``)."""

    message_id: str = doc("The reply rated")
    rating: str = doc("up, down, or empty: the rating taken back")
    reason: str = doc("Why, in the user's words (at most 500 characters; empty when none was given)", sealed=True, default="")

    def __post_init__(self) -> None:
        _check(self.rating, RATINGS, "rating")


@dataclass(frozen=True, kw_only=True)
class ConversationShared(ConversationEvent):
    """The owner made a read-only link to the branch selected now (DESIGN.md §7, shares). gateway →
    materializer (``shares``, ``shares_by_conversation``)."""

    share_id: str = doc("SHA-256 of the link's secret (hex): the share's key; the secret is never on the log in the clear")
    secret: str = doc("The link's secret, sealed: only for its owner to copy the link again", sealed=True)
    leaf_id: str = doc("The end of the branch shared: the link shows the messages from the root to it")
    expires_at: int = doc("When the link stops working, µs since the epoch; 0: never", default=0)


@dataclass(frozen=True, kw_only=True)
class ShareRevoked(ConversationEvent):
    """The owner ended a link: it answers 404 from then on. gateway → materializer."""

    share_id: str = doc("The share ended")


@dataclass(frozen=True, kw_only=True)
class ConversationDeleted(ConversationEvent):
    """The user deleted the conversation: gone from every read path. What it means for the log (erasure) is
    the data-safety design's. gateway → materializer, context builder."""


# -------------------------------------------------------------- chat.inference


@dataclass(frozen=True, kw_only=True)
class GenerationModerated(ConversationEvent):
    """A turn's input or reply was flagged: the reply shows a notice instead of its text, and ends
    content_filter. moderation (or the context builder, for a strict policy) → materializer, context builder."""

    request_id: str = doc("The assistant message id")
    parent_id: str = doc("The user message the reply answers ('': not known to the moderator after a restart)")
    attempt: int = doc("Attempt that was flagged", default=0)
    direction: str = doc("input | output")
    stage: str = doc("input | window | final")
    action: str = doc("cut | withdrawn")
    categories: list[str] = doc("What was flagged", default_factory=list)
    result_id: str = doc("The ModerationResult that flagged it (chat.moderation)", default="")

    def __post_init__(self) -> None:
        _check(self.direction, MODERATION_DIRECTIONS, "direction")
        _check(self.stage, MODERATION_STAGES, "stage")
        _check(self.action, MODERATION_ACTIONS, "action")


@dataclass(frozen=True, kw_only=True)
class ToolCallDecided(ConversationEvent):
    """The permission broker judged a call a reply made to one of Parley's tools (DESIGN.md §13). The model
    never decides: the broker's rules do. broker (streams/tool_broker.py) → materializer of tool calls, gateway."""

    request_id: str = doc("The reply that made the call")
    call: ToolCall = doc("The call as the model made it")
    decision: str = doc("allow | ask (a person must answer) | deny")
    rule: str = doc("What decided: operator:NAME, org:NAME, unknown-tool, invalid-arguments, read-only, mode:…, no-rule")
    reason: str = doc("Why, in words that never quote an argument's value", default="")

    def __post_init__(self) -> None:
        _check(self.decision, TOOL_DECISIONS, "decision")


@dataclass(frozen=True, kw_only=True)
class ToolCallAnswered(ConversationEvent):
    """The conversation's owner answered a call the broker asked about (gateway, POST
    /v1/conversations/{id}/tool-calls/{call_id}), or the broker's timer found it unanswered too long
    (expire) → broker, which takes the first answer a call gets on the log."""

    request_id: str = doc("The reply that made the call")
    call_id: str = doc("The call answered")
    answer: str = doc("approve | edit | reject | expire")
    arguments: str = doc("With edit: the arguments to run it with, as JSON text (the broker judges them again)", default="", sealed=True)

    def __post_init__(self) -> None:
        _check(self.answer, TOOL_ANSWERS, "answer")


@dataclass(frozen=True, kw_only=True)
class ToolCallCleared(ConversationEvent):
    """A call may run: allowed by the broker, or approved by the owner. broker → the tool executor
    (chat.tools; workers/tool_executor.py), which runs it at most once."""

    request_id: str = doc("The reply that made the call")
    call: ToolCall = doc(
        "The call to run, with the arguments it runs with; a new owner looks on chat.events from this event's "
        "time for what an earlier one did"
    )
    org_id: str = doc("The owner's organisation", default="")


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted(ConversationEvent):
    """The executor is about to call the tool; committed before the call goes out. executor → broker, replay."""

    request_id: str = doc("The reply that made the call")
    call_id: str = doc("The call: also the idempotency key the tool is sent")
    name: str = doc("The tool")
    executor: str = doc("The executor instance that started it", default="")


@dataclass(frozen=True, kw_only=True)
class ToolCallFinished(ConversationEvent):
    """A call ended, whatever the way. executor (ok, error, unknown), broker (denied, rejected, expired) → broker
    (which continues the turn once every call of the reply has ended), materializer, replay."""

    request_id: str = doc("The reply that made the call")
    call_id: str = doc("The call")
    name: str = doc("The tool")
    outcome: str = doc("ok | error | denied | rejected | expired | unknown")
    result: str = doc("What the tool returned (untrusted data), or what the model is told instead", default="", sealed=True)
    error: str = doc("Why it did not succeed, in words that never quote the tool's output", default="")

    def __post_init__(self) -> None:
        _check(self.outcome, TOOL_OUTCOMES, "outcome")


@dataclass(frozen=True, kw_only=True)
class PromptMessage:
    """One message of a built prompt."""

    role: str = doc("system | user | assistant | tool")
    content: str = doc("Text", sealed=True)
    tool_calls: list[ToolCall] = doc("An assistant message's tool calls", default_factory=list)
    tool_call_id: str = doc("A tool message's call", default="")


@dataclass(frozen=True, kw_only=True)
class Passage:
    """A retrieved chunk of a document, as the prompt shows it."""

    label: str = doc("How the prompt names it: [filename p.N]", sealed=True)
    document_id: str = doc("The document")
    chunk_id: str = doc("The chunk")
    page: int = doc("1-based page")
    text: str = doc("The chunk's text (never logged)", sealed=True)
    char_start: int = doc("Offset of the text in the page's text", default=0)
    filename: str = doc("The document's name as uploaded", default="", sealed=True)
    injection: str = doc(
        "The prompt-injection rule the text matched ('': none); the prompt marks such a passage as data", default=""
    )


@dataclass(frozen=True, kw_only=True)
class DocumentCoverage:
    """How much of one document a turn could search."""

    document_id: str = doc("The document")
    filename: str = doc("Its name", default="", sealed=True)
    status: str = doc("processing | ready | failed | missing (deleted, or not the user's)")
    pages_ready: int = doc("Pages 1..pages_ready were searched", default=0)
    pages_total: int = doc("Pages in the document (0: not yet counted)", default=0)


@dataclass(frozen=True, kw_only=True)
class InjectionFlag:
    """A retrieved passage that reads as instructions aimed at the assistant (moderation/injection.py)."""

    document_id: str = doc("The document")
    chunk_id: str = doc("The chunk")
    page: int = doc("1-based page")
    rule: str = doc("The detector's rule that matched")


RETRIEVAL_PATHS = frozenset({"hybrid", "keyword", "vector", "none"})


@dataclass(frozen=True, kw_only=True)
class Retrieval:
    """What a turn's document search did: which path answered, what it searched and what it found."""

    path: str = doc("hybrid | keyword (semantic search was down) | vector | none (nothing searchable)")
    documents: list[DocumentCoverage] = doc("Each document of the turn, in the order given", default_factory=list)
    passages: list[Passage] = doc("What the prompt shows, in prompt order", default_factory=list)
    note: str = doc("What the prompt told the model about coverage, e.g. 'pages 1–12 of 150 indexed'", default="", sealed=True)
    latency_ms: float = doc("Time the search took", default=0.0)
    injections: list[InjectionFlag] = doc(
        "Passages shown that read as instructions to the assistant (kept when the passages' text is dropped)",
        default_factory=list,
    )

    def __post_init__(self) -> None:
        _check(self.path, RETRIEVAL_PATHS, "path")


@dataclass(frozen=True, kw_only=True)
class InferenceRequested(ConversationEvent):
    """A prompt is ready for a model. context builder → router."""

    request_id: str = doc("The assistant message id")
    parent_id: str = doc("The user message the reply answers")
    attempt: int = doc("0 for the first attempt; raised on each restart", default=0)
    messages: list[PromptMessage] = doc("The built prompt, in order", default_factory=list)
    prompt_tokens: int = doc("Token estimate of the prompt", default=0)
    budget_tokens: int = doc("Token budget the builder worked under", default=0)
    max_tokens: int = doc(
        "Cap on generated tokens; 0: up to the end of the routed pool's context (an as-sent request without a "
        "cap, the OpenAI API's default), which the router resolves before the turn reaches a worker",
        default=512,
    )
    model: str | None = doc("Model the user selected, if any", default=None)
    tier: str = doc("free | plus | enterprise", default="free")
    resume_text: str = doc("Reply text already streamed by an earlier attempt, to continue from", default="", sealed=True)
    sampling: Sampling = doc("How the reply is sampled, as the turn asked", default_factory=Sampling)
    requested_at: int = doc(
        "When the turn was asked for (µs; the GenerationRequested's occurred_at): the same in every re-emission, "
        "so the router can tell whether its memory of decisions reaches back that far (0: unknown, older writers)",
        default=0,
    )
    retrieval: Retrieval | None = doc("The turn's document search; null when the turn has no documents", default=None)
    tools: Tools | None = doc("Functions the client offers the model (GenerationRequested.tools)", default=None)
    experiment: Assignment | None = doc("The turn's experiment arm (GenerationRequested.experiment): the router applies its overrides", default=None)


@dataclass(frozen=True, kw_only=True)
class InferenceRouted(ConversationEvent):
    """A request placed on a pool and partition. router → workers of that pool."""

    request: InferenceRequested = doc("The request as the context builder built it")
    pool: str = doc("small | medium | frontier")
    model: str = doc("Model name of the pool")
    partition: int = doc("Partition of chat.inference.<pool> the router chose")
    route_reason: str = doc(
        "Why: classifier, sticky, new, hashed, user_selected, experiment, escalated, moved_hot, moved_gone, downgraded", default=""
    )
    downgraded_from: str | None = doc("Pool the turn would have used before admission downgraded it", default=None)
    repeat: bool = doc(
        "The router routed this attempt before and repeats that decision (a second record of the attempt): "
        "the partition's owner when the first came may have run it, so a worker looks it up",
        default=False,
    )


# ------------------------------------------------------------------ chat.tokens


@dataclass(frozen=True, kw_only=True)
class TokenChunk(ConversationEvent):
    """Some generated text. worker → gateways (SSE), materializer (checkpoints), moderation."""

    request_id: str = doc("The assistant message id")
    attempt: int = doc("Attempt that produced it; readers drop chunks of superseded attempts", default=0)
    seq: int = doc("0, 1, 2… within one attempt")
    text: str = doc("Text delta since the previous chunk", default="", sealed=True)
    tokens: int = doc("Tokens in this delta", default=0)
    offset_chars: int = doc("Characters of the reply before this delta (for resuming attempts)", default=0)
    finish_reason: str | None = doc("Set on the last chunk only", default=None)
    usage: Usage | None = doc("Set on the last chunk only", default=None)
    replica: str = doc("Worker id", default="")
    model: str = doc(
        "The model generating the reply, as its engine names it: on an attempt's first chunk and on the last", default=""
    )
    error_code: str | None = doc("On a last chunk that failed or was rejected: machine-readable cause", default=None)
    error_message: str | None = doc("On a last chunk that failed or was rejected: human-readable cause", default=None)
    retry_after: float | None = doc("On a rejected last chunk: seconds after which a retry may succeed", default=None)
    citations: list[Citation] = doc("On the last chunk: the passages the reply drew on", default_factory=list)
    citation_status: str = doc("On the last chunk: '' | cited | uncited (see GenerationCompleted)", default="")
    documents_note: str = doc("On the last chunk: how much of the turn's documents was searched (Retrieval.note)", default="", sealed=True)
    tool_calls: list[ToolCall] = doc("On the last chunk: the client's functions the reply calls", default_factory=list)

    def __post_init__(self) -> None:
        _check(self.finish_reason, FINISH_REASONS, "finish_reason")
        _check(self.citation_status, CITATION_STATUSES, "citation_status")


# ----------------------------------------------------------------- chat.control


@dataclass(frozen=True, kw_only=True)
class GenerationCancelRequested(ConversationEvent):
    """Stop a generation. gateway, moderation, router → every worker."""

    request_id: str = doc("The assistant message id")
    reason: str = doc("user | moderation | abandoned | shed")

    def __post_init__(self) -> None:
        _check(self.reason, CANCEL_REASONS, "reason")


# -------------------------------------------------------------- chat.moderation


@dataclass(frozen=True, kw_only=True)
class CategoryScore:
    """One category's score from a moderation classifier (OpenAI's category names)."""

    category: str = doc("harassment, hate/threatening, self-harm/intent, … (moderation/categories.py)")
    score: float = doc("0..1")


@dataclass(frozen=True, kw_only=True)
class ModerationResult(ConversationEvent):
    """One check of a turn's input or of a window of its reply. moderation → analysts, audits.

    The event id is uuid5 of the request, attempt, stage and window end: a check
    repeated after a restart carries the same id."""

    request_id: str = doc("The assistant message id")
    message_id: str = doc("What was checked: the user message (input) or the reply (output)")
    attempt: int = doc("Attempt whose text was checked (output)", default=0)
    direction: str = doc("input | output")
    stage: str = doc("input | window | final")
    window_start: int = doc("Reply tokens before the checked text (output; includes the overlap)", default=0)
    window_end: int = doc("Reply tokens up to the end of the checked text (output)", default=0)
    scores: list[CategoryScore] = doc("Every category's score", default_factory=list)
    categories: list[str] = doc("Categories the turn's policy blocks that reached their threshold", default_factory=list)
    verdict: str = doc("clean | flagged | failed (the classifier gave no verdict in time: the turn is stopped as if flagged)")
    action: str = doc("none | cut (the stream was stopped) | withdrawn (it had ended; replaced afterwards)", default="none")
    model: str = doc("Classifier and version that scored it", default="")
    policy: str = doc("The tier whose policy applied", default="")
    text: str | None = doc("The flagged text, kept for review only where the policy retains it (else null)", default=None, sealed=True)
    latency_ms: float = doc("Time the classifier took", default=0.0)

    def __post_init__(self) -> None:
        _check(self.direction, MODERATION_DIRECTIONS, "direction")
        _check(self.stage, MODERATION_STAGES, "stage")
        _check(self.action, MODERATION_ACTIONS, "action")
        _check(self.verdict, frozenset({"clean", "flagged", "failed"}), "verdict")


# -------------------------------------------------------------------- chat.usage


@dataclass(frozen=True, kw_only=True)
class UsageRecorded(ConversationEvent):
    """What one generation cost. worker → usage aggregator, analysts. Keyed by user."""

    key_field: ClassVar[str] = "user_id"

    request_id: str = doc("The assistant message id")
    attempt: int = doc("Attempt", default=0)
    tier: str = doc("free | plus | enterprise", default="free")
    pool: str = doc("Pool that served it", default="")
    model: str = doc("Model that served it", default="")
    replica: str = doc("Worker id", default="")
    usage: Usage = doc("Token counts", default_factory=Usage)
    queue_ms: float = doc("From InferenceRouted to engine admission", default=0.0)
    ttft_ms: float = doc("From engine submission to first token", default=0.0)
    duration_ms: float = doc("From engine submission to last token", default=0.0)
    finish_reason: str = doc("stop | length | cancelled | failed | rejected | content_filter", default="stop")


# ------------------------------------------------------------- fleet.heartbeats


@dataclass(frozen=True, kw_only=True)
class WorkerHeartbeat(Event):
    """A worker's load and cache state, every few seconds. worker → router. Compacted by worker id."""

    key_field: ClassVar[str] = "worker_id"

    worker_id: str = doc("Stable id of the worker process")
    pool: str = doc("Pool it serves")
    model: str = doc("Model its engine runs", default="")
    partitions: list[int] = doc("Partitions of chat.inference.<pool> it owns", default_factory=list)
    read_to: list[int] = doc(
        "Per partition of `partitions`, in the same order: the offset of the next record it will take (one past"
        " the last it took), -1 before it took one; empty from a worker that does not say",
        default_factory=list,
    )
    running: int = doc("Generations running in its engine", default=0)
    queued: int = doc("Requests accepted but not yet started", default=0)
    max_running: int = doc("Its concurrency limit", default=0)
    kv_usage: float = doc("Fraction of the engine's KV cache in use, 0..1", default=0.0)
    cache_hit_rate: float = doc("Prefix cache hit rate reported by the engine, 0..1", default=0.0)
    draining: bool = doc("True while it finishes work before leaving", default=False)


# ------------------------------------------------------------------ ops.experiments


@dataclass(frozen=True, kw_only=True)
class ExperimentArm:
    """One arm of an experiment: its share of the experiment's users and what it changes."""

    name: str = doc("The arm's name, unique in its experiment (e.g. control, treatment)")
    share: float = doc("Its share of the experiment's users, (0, 1]; the arms' shares add up to 1")
    overrides: ArmOverrides = doc("What it changes in the router (all unset: a control arm)", default_factory=ArmOverrides)


@dataclass(frozen=True, kw_only=True)
class ExperimentStarted(Event):
    """An operator started an experiment: from now on the gateway assigns each turn of its tiers' users to an
    arm, by user, and stamps it on the GenerationRequested. `parley experiments start` → gateways (the
    running set), `parley experiments list`, analysts. Keyed by name; a later start of the same name
    replaces it (one experiment a name at a time)."""

    key_field: ClassVar[str] = "experiment"

    experiment: str = doc("Its name: the Kafka key, and what `parley report --experiment` names")
    arms: list[ExperimentArm] = doc("Its arms, in the order declared", default_factory=list)
    tiers: list[str] = doc("The tiers whose turns take part (free, plus, enterprise); empty: every tier", default_factory=list)
    started_by: str = doc("Who started it (the operator's name, as given)", default="")
    note: str = doc("What it tests, in the operator's words (never a user's text)", default="")


@dataclass(frozen=True, kw_only=True)
class ExperimentStopped(Event):
    """An operator stopped an experiment: turns asked for after the gateways read this carry no arm of it.
    `parley experiments stop` → gateways, `parley experiments list`, analysts."""

    key_field: ClassVar[str] = "experiment"

    experiment: str = doc("The experiment stopped")
    stopped_by: str = doc("Who stopped it", default="")


# ------------------------------------------------------------------ docs.events


@dataclass(frozen=True, kw_only=True)
class DocumentEvent(Event):
    key_field: ClassVar[str] = "document_id"

    document_id: str = doc("The document; the Kafka key")
    user_id: str = doc("Owner")


@dataclass(frozen=True, kw_only=True)
class DocumentUploaded(DocumentEvent):
    """A file was stored. gateway → document worker, materializer."""

    conversation_id: str | None = doc("Conversation it was attached to, if any", default=None)
    filename: str = doc("Name as uploaded", sealed=True)
    media_type: str = doc("MIME type")
    size_bytes: int = doc("Size")
    sha256: str = doc("The file's SHA-256 keyed by the owner's data key (an HMAC): it confirms no guess once the key is destroyed")
    storage_uri: str = doc("Where the original lies")


@dataclass(frozen=True, kw_only=True)
class DocumentPagesExtracted(DocumentEvent):
    """A batch of pages is extracted, chunked and indexed: pages 1..last_page are searchable from now on.
    document worker → materializer (documents.pages_ready)."""

    pages: int = doc("Pages in this batch")
    chars: int = doc("Characters extracted in this batch", default=0)
    first_page: int = doc("First page of the batch (1-based)", default=0)
    last_page: int = doc("Last page of the batch; every page up to it is indexed", default=0)
    pages_total: int = doc("Pages in the document", default=0)
    ocr_pages: int = doc("Pages of the batch read by OCR (no text layer)", default=0)
    chunks: int = doc("Chunks written for the batch", default=0)


@dataclass(frozen=True, kw_only=True)
class DocumentIndexed(DocumentEvent):
    """Every page is indexed. document worker → materializer."""

    chunks: int = doc("Chunks written")
    embedding_model: str = doc("Model that embedded them", default="")
    pages_total: int = doc("Pages in the document", default=0)
    ocr_pages: int = doc("Pages read by OCR", default=0)


@dataclass(frozen=True, kw_only=True)
class DocumentFailed(DocumentEvent):
    """The file was refused (unsafe, unreadable, no text) or processing failed; nothing of it is served.
    document worker → materializer."""

    error_code: str = doc("Machine-readable cause")
    error_message: str = doc("Human-readable cause", default="")


@dataclass(frozen=True, kw_only=True)
class DocumentDeleted(DocumentEvent):
    """The owner deleted the document: processing stops, its rows and original go. gateway → document worker,
    materializer."""

    conversation_id: str | None = doc("Conversation it was attached to, if any", default=None)


# ------------------------------------------------------------------ user.memory


@dataclass(frozen=True, kw_only=True)
class MemoryFact:
    """One thing the user asked Parley to remember."""

    fact_id: str = doc("uuid5 of the user and the text keyed by their data key (an HMAC): the same fact keeps its id")
    text: str = doc("The fact (never logged)", sealed=True)


@dataclass(frozen=True, kw_only=True)
class MemoryUpdated(Event):
    """The user's whole memory after a change (a snapshot: the compacted topic keeps the latest).
    gateway → context builder (prompts), materializer (user_memory)."""

    key_field: ClassVar[str] = "user_id"

    user_id: str = doc("Whose memory; the Kafka key")
    facts: list[MemoryFact] = doc("Every fact, in the order they are rendered into prompts", default_factory=list)


# ------------------------------------------------------------------------ user.erasures

ERASED_BY = frozenset({"self", "admin", "operator"})


@dataclass(frozen=True, kw_only=True)
class ErasureRequested(Event):
    """A user is to be erased: they are refused from now on, and the erasure job carries the rest out to
    the end, surviving restarts (DESIGN.md §12). gateway (DELETE /v1/me, an admin's DELETE
    /v1/org/users/{id}), `parley users erase` → the erasure processor (streams/erasure.py)."""

    key_field: ClassVar[str] = "user_id"

    user_id: str = doc("Who is to be erased; the Kafka key")
    org_id: str = doc("Their organisation", default="")
    by: str = doc("self (DELETE /v1/me) | admin (DELETE /v1/org/users/{id}) | operator (parley users erase)")

    def __post_init__(self) -> None:
        _check(self.by, ERASED_BY, "by")


@dataclass(frozen=True, kw_only=True)
class UserErased(Event):
    """A user was erased: their conversations, documents and memory deleted, then their data key
    destroyed, so whatever of theirs was sealed, anywhere it was copied, reads "[erased]" (DESIGN.md §12).
    The erasure processor, last step of an ErasureRequested → analysts, `parley audit erasure`."""

    key_field: ClassVar[str] = "user_id"

    user_id: str = doc("Who was erased; the Kafka key")
    org_id: str = doc("Their organisation", default="")
    by: str = doc("self (DELETE /v1/me) | admin (DELETE /v1/org/users/{id}) | operator (parley users erase)")
    conversations: int = doc("Conversations deleted", default=0)
    documents: int = doc("Documents deleted", default=0)

    def __post_init__(self) -> None:
        _check(self.by, ERASED_BY, "by")


# ------------------------------------------------------------------------ *.dlq


@dataclass(frozen=True, kw_only=True)
class DeadLetter(Event):
    """An event a processor could not decode or validate. any processor → operators. Keyed like the original.

    What an error says about a record that names its owner is sealed under the owner's key (``detail``), so
    an erasure shreds it with the rest; ``error`` then holds only the error's class."""

    key_field: ClassVar[str] = "raw_key"

    source_topic: str = doc("Topic the bad record came from")
    source_partition: int = doc("Its partition")
    source_offset: int = doc("Its offset")
    consumer: str = doc("Consumer group or processor that rejected it", default="")
    error_type: str = doc("Class of the error: undecodable, unknown_schema, invalid, oversize…")
    error: str = doc(
        "What was wrong, never the payload: the error's class when the record names its owner, else the codec's words about bytes it could not read"
    )
    raw_key: bytes | None = doc("Original key bytes", default=None)
    raw_value: bytes | None = doc("Original value bytes (their content fields sealed, as the topic holds them)", default=None)
    user_id: str = doc("The bad record's owner when it parses far enough to name one, else ''", default="")
    detail: str = doc("The error's own words, when the record names its owner ('' otherwise)", default="", sealed=True)

    @property
    def key(self) -> bytes:
        return self.raw_key or b""


#: Every event type on the wire, by Avro record name.
EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        ConversationCreated,
        MessagePosted,
        GenerationRequested,
        GenerationCompleted,
        SummaryWritten,
        LeafSelected,
        ConversationRenamed,
        ConversationArchived,
        ConversationDeleted,
        FeedbackGiven,
        ConversationShared,
        ShareRevoked,
        GenerationModerated,
        ToolCallDecided,
        ToolCallAnswered,
        ToolCallCleared,
        ToolCallStarted,
        ToolCallFinished,
        InferenceRequested,
        InferenceRouted,
        TokenChunk,
        GenerationCancelRequested,
        ModerationResult,
        UsageRecorded,
        WorkerHeartbeat,
        ExperimentStarted,
        ExperimentStopped,
        DocumentUploaded,
        DocumentPagesExtracted,
        DocumentIndexed,
        DocumentFailed,
        DocumentDeleted,
        MemoryUpdated,
        ErasureRequested,
        UserErased,
        DeadLetter,
    )
}
