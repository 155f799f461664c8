"""A third-party client (the official Python SDK, `mcp` 2.x) driving
`mcpvisor gateway` in the SDK's default connect mode (`auto`: it probes
`server/discover` and falls back to `initialize`) unless told otherwise.

    python gateway_client.py stdio <mcpvisor> <config> <tool> [--mode M]
    python gateway_client.py http <url> <tool> [--mode M]

It lists the gateway's tools until <tool> is listed (20 s at most), calls it
with {"message": "from python"}, and prints one JSON object on stdout:
{"protocol_version", "tools", "call": {"is_error", "text"}}; on failure
{"error": "..."} and exit status 1. The Rust test
(chaos-tests/tests/all/gateway.rs) reads it.

With `--listen ADD_TOOL ERROR_TOOL` (the 2026-07-28 era only) it also calls
ERROR_TOOL (a relayed `isError` result: "error_call"), opens a
`subscriptions/listen` stream for tool list changes, calls ADD_TOOL, waits
for the change on the stream (20 s at most) and lists again: "listen":
{"event", "tools"}.

With `--elicit DECISION` the client answers every elicitation by accepting
{"decision": DECISION}, and reports the messages it was asked ("asked").

With `--prompts-change ADD_TOOL` (the 2026-07-28 era) it opens a listen
stream for prompt list changes, calls ADD_TOOL, waits for the change
(20 s at most) and lists the prompts: "prompts": {"event", "names"}.

With `--resource-change URI TOOL` (the 2026-07-28 era) it opens a listen
stream for updates of URI, waits for the first event (the server says the
resource may have changed once it follows it), calls TOOL, waits for the
next event (20 s at most each) and reports both: "resource": {"first",
"then", "uri"}.

With `--after TOOL` as well, it then calls TOOL and waits for one more
event ("after": its type).

With `--logs LEVEL` the client sets its log level to LEVEL before the
call and reports the log messages it got until the first one ("logs":
[[level, logger, data], ...]; 20 s at most).

With `--args JSON` the call's arguments are JSON instead. With `--answer
JSON` every elicitation is accepted with the content JSON (and reported in
"asked" like `--elicit`). With `--sample TEXT` the client declares sampling
and answers every sampling request with TEXT ("sampled": the text of each
request's first message). With `--roots URI` it declares roots and lists
URI as its one root ("rooted": how many times it was asked).

With `--progress` the call asks for progress and reports each
notification it got during the call ("progress": [[progress, total,
message], ...]).

With `--read URI` it then reads URI ("read": the text of its contents).
With `--prompt NAME KEY=VALUE` it then gets the prompt NAME with that one
argument ("prompt": the text of its first message).

With `--change ADD_TOOL` it calls ADD_TOOL and, after each tool list
change heard from then on, lists again, until the list differs from its
first one (20 s at most): "change": {"heard" (changes heard since the
call), "tools" (the new list)}. In the 2025-11-25 era (`--mode legacy`) a
change is a notifications/tools/list_changed the client's `message_handler`
receives; in the 2026-07-28 era it comes on a `subscriptions/listen` stream
opened for tool list changes before the call.
"""

import asyncio
import json
import sys
import time

import mcp.types as types

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

LIMIT_S = 20.0


async def listen_for_change(client, add_tool, error_tool):
    """The --listen steps (see the module docs)."""
    failed = await client.call_tool(error_tool, {})
    error_text = "\n".join(
        b.text for b in failed.content if getattr(b, "type", None) == "text"
    )
    async with client.listen(tools_list_changed=True) as sub:
        await client.call_tool(add_tool, {})
        event = await asyncio.wait_for(sub.__anext__(), LIMIT_S)
    listed = await client.list_tools(cache_mode="bypass")
    return {
        "error_call": {"is_error": bool(failed.is_error), "text": error_text},
        "listen": {
            "event": type(event).__name__,
            "tools": [t.name for t in listed.tools],
        },
    }


async def prompts_change(client, add_tool):
    """The --prompts-change steps (see the module docs)."""
    async with client.listen(prompts_list_changed=True) as sub:
        await client.call_tool(add_tool, {})
        event = await asyncio.wait_for(sub.__anext__(), LIMIT_S)
    listed = await client.list_prompts()
    return {"event": type(event).__name__, "names": [p.name for p in listed.prompts]}


async def resource_change(client, uri, tool, after=None):
    """The --resource-change steps (see the module docs)."""
    out = {}
    async with client.listen(resource_subscriptions=[uri]) as sub:
        first = await asyncio.wait_for(sub.__anext__(), LIMIT_S)
        await client.call_tool(tool, {})
        then = await asyncio.wait_for(sub.__anext__(), LIMIT_S)
        if after is not None:
            await client.call_tool(after, {})
            last = await asyncio.wait_for(sub.__anext__(), LIMIT_S)
            out["after"] = type(last).__name__
    out.update({
        "first": type(first).__name__,
        "then": type(then).__name__,
        "uri": getattr(then, "uri", None),
    })
    return out


async def read_and_prompt(client, extra):
    """The --read and --prompt steps (see the module docs)."""
    out = {}
    if "read" in extra:
        got = await client.read_resource(extra["read"])
        out["read"] = "\n".join(getattr(c, "text", "") for c in got.contents)
    if "prompt" in extra:
        name, pair = extra["prompt"]
        key, _, value = pair.partition("=")
        got = await client.get_prompt(name, {key: value})
        first = got.messages[0].content if got.messages else None
        out["prompt"] = getattr(first, "text", None)
    return out


async def tool_list_change(client, add_tool, first, changed):
    """The --change steps (see the module docs). `first` is the first list;
    the message handler sets `changed` on each
    notifications/tools/list_changed."""

    async def call_and_list(change):
        deadline = time.monotonic() + LIMIT_S
        heard = 0
        added = await client.call_tool(add_tool, {})
        names = first
        while names == first:
            try:
                await asyncio.wait_for(change(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                said = "\n".join(b.text for b in added.content if getattr(b, "type", None) == "text")
                raise RuntimeError(
                    f"no new tool list within {LIMIT_S} s ({heard} changes heard); {add_tool} said {said!r}"
                ) from None
            heard += 1
            listed = await client.list_tools(cache_mode="bypass")
            names = [t.name for t in listed.tools]
        return {"heard": heard, "tools": names}

    if client.protocol_version < "2026-07-28":
        changed.clear()

        async def notified():
            await changed.wait()
            changed.clear()

        return await call_and_list(notified)
    async with client.listen(tools_list_changed=True) as sub:
        return await call_and_list(sub.__anext__)


async def run(server, tool, mode, listen=None, elicit=None, progress=False, prompts=None, logs=None, resource=None, extra=None):
    extra = extra or {}
    asked = []
    sampled = []
    rooted = []
    noted = []
    logged = []
    got_log = asyncio.Event()

    async def on_log(params):
        logged.append([params.level, params.logger, params.data])
        got_log.set()

    async def note(done, total, message):
        noted.append([done, total, message])

    async def answer(_context, params):
        asked.append(params.message)
        content = extra["answer"] if "answer" in extra else {"decision": elicit}
        return types.ElicitResult(action="accept", content=content)

    async def sample(_context, params):
        first = params.messages[0].content if params.messages else None
        sampled.append(getattr(first, "text", None))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=extra["sample"]),
            model="python-sampler",
        )

    async def roots(_context):
        rooted.append(1)
        return types.ListRootsResult(roots=[types.Root(uri=extra["roots"], name="the root")])

    options = {"elicitation_callback": answer} if elicit is not None or "answer" in extra else {}
    if "sample" in extra:
        options["sampling_callback"] = sample
    if "roots" in extra:
        options["list_roots_callback"] = roots
    if logs is not None:
        options["logging_callback"] = on_log
    changed = asyncio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    if "change" in extra:
        options["message_handler"] = on_message
    async with Client(server, mode=mode, **options) as client:
        deadline = time.monotonic() + LIMIT_S
        while True:
            listed = await client.list_tools(cache_mode="bypass")
            names = [t.name for t in listed.tools]
            if tool in names:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tool} never listed; got {names}")
            await asyncio.sleep(0.2)
        if logs is not None:
            await client.set_logging_level(logs)
        result = await client.call_tool(
            tool,
            extra.get("args", {"message": "from python"}),
            progress_callback=note if progress else None,
        )
        text = "\n".join(
            b.text for b in result.content if getattr(b, "type", None) == "text"
        )
        out = {
            "protocol_version": client.protocol_version,
            "tools": names,
            "call": {
                "is_error": bool(result.is_error),
                "text": text,
                "meta": dict(result.meta) if result.meta else None,
            },
        }
        if listen is not None:
            out.update(await listen_for_change(client, *listen))
        if elicit is not None or "answer" in extra:
            out["asked"] = asked
        if "sample" in extra:
            out["sampled"] = sampled
        if "roots" in extra:
            out["rooted"] = len(rooted)
        if progress:
            out["progress"] = noted
        if prompts is not None:
            out["prompts"] = await prompts_change(client, prompts)
        if resource is not None:
            out["resource"] = await resource_change(client, *resource, extra.get("after"))
        out.update(await read_and_prompt(client, extra))
        if "change" in extra:
            out["change"] = await tool_list_change(client, extra["change"], names, changed)
        if logs is not None:
            await asyncio.wait_for(got_log.wait(), LIMIT_S)
            out["logs"] = logged
        return out


def describe(e):
    """An exception in words, the ones inside an exception group included."""
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


def main(argv):
    mode = "auto"
    if "--mode" in argv:
        at = argv.index("--mode")
        mode = argv[at + 1]
        del argv[at : at + 2]
    resource = None
    if "--resource-change" in argv:
        at = argv.index("--resource-change")
        resource = (argv[at + 1], argv[at + 2])
        del argv[at : at + 3]
    logs = None
    if "--logs" in argv:
        at = argv.index("--logs")
        logs = argv[at + 1]
        del argv[at : at + 2]
    prompts = None
    if "--prompts-change" in argv:
        at = argv.index("--prompts-change")
        prompts = argv[at + 1]
        del argv[at : at + 2]
    progress = "--progress" in argv
    if progress:
        argv.remove("--progress")
    elicit = None
    if "--elicit" in argv:
        at = argv.index("--elicit")
        elicit = argv[at + 1]
        del argv[at : at + 2]
    extra = {}
    for flag, key, parse in [
        ("--args", "args", json.loads),
        ("--answer", "answer", json.loads),
        ("--sample", "sample", str),
        ("--roots", "roots", str),
        ("--after", "after", str),
        ("--read", "read", str),
        ("--change", "change", str),
    ]:
        if flag in argv:
            at = argv.index(flag)
            extra[key] = parse(argv[at + 1])
            del argv[at : at + 2]
    if "--prompt" in argv:
        at = argv.index("--prompt")
        extra["prompt"] = (argv[at + 1], argv[at + 2])
        del argv[at : at + 3]
    listen = None
    if "--listen" in argv:
        at = argv.index("--listen")
        listen = (argv[at + 1], argv[at + 2])
        del argv[at : at + 3]
    if argv[1] == "stdio":
        _, _, mcpvisor, config, tool = argv
        server = StdioServerParameters(
            command=mcpvisor, args=["--config", config, "gateway", "--stdio"]
        )
    else:
        _, _, url, tool = argv
        server = url
    try:
        out = asyncio.run(asyncio.wait_for(run(server, tool, mode, listen, elicit, progress, prompts, logs, resource, extra), 60))
    except BaseException as e:  # noqa: BLE001 - every failure is reported
        print(json.dumps({"error": describe(e)}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(list(sys.argv)))
