#!/usr/bin/env python3
"""A Pegasus tool worker in Python, on the standard library only.

It serves the worker tool "shout" of a configuration file such as

    tools:
      - name: shout
        description: Upper-cases a text.
        parameters: {type: object, properties: {text: {type: string}}, required: [text]}
        capability: shout

The agent's call of the tool becomes a broker task (docs/tools.md, "Worker
tools") that requires the capability "shout": its metadata holds "tool" (the
tool's name), "arguments" (the call's arguments, a JSON object) and
"idempotency_key" (the same on every run of the call). This worker registers
with the capability, long-polls for the tasks assigned to it, and completes
each with {"text": ARGUMENT UPPER-CASED}, which the model reads as the tool's
result. Arguments it cannot use fail the task for good (retry_eligible false),
which the model reads as the tool's error.

    python3 examples/worker-python/worker.py --url http://127.0.0.1:7070 --id shouter

It survives the daemon: a request that cannot reach it is tried again after a
pause. Stop it with Ctrl-C, or give --stop-after N to stop after N tasks.
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


class Refused(Exception):
    """The daemon answered with an error status: asking again changes nothing."""

    def __init__(self, status, body):
        super().__init__("HTTP %d: %s" % (status, body))
        self.status = status


def call(base, method, path, agent, token, body=None, timeout=60):
    """One request of the broker API; the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("X-Agent-ID", agent)  # who is calling: every /api/v1 route wants it
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        raise Refused(e.code, e.read().decode(errors="replace").strip()) from None


def patiently(what, f):
    """f(), again after a pause while the daemon cannot be reached or is busy."""
    pause = 0.5
    while True:
        try:
            return f()
        except Refused as e:
            if e.status < 500 and e.status != 429:
                raise
            err = e
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            err = e
        print("%s failed (%s); trying again" % (what, err), file=sys.stderr, flush=True)
        time.sleep(pause)
        pause = min(pause * 2, 10)


def arguments(task):
    """The tool call's arguments: the task's metadata "arguments", a JSON object."""
    args = (task.get("metadata") or {}).get("arguments")
    if args is None:  # the same object is the task's description, as JSON text
        args = task.get("description") or "{}"
    if isinstance(args, str):
        args = json.loads(args)
    if not isinstance(args, dict):
        raise ValueError("the arguments are not a JSON object")
    return args


def shout(args):
    text = args.get("text")
    if not isinstance(text, str):
        raise ValueError('"text" is missing or not a string')
    return {"text": text.upper()}


def main():
    p = argparse.ArgumentParser(description="A Pegasus tool worker that serves the tool shout.")
    p.add_argument("--url", default=os.environ.get("PEGASUS_SERVER", "http://127.0.0.1:7070"),
                   help="the daemon's address")
    p.add_argument("--id", default="python-shouter", help="this worker's id (X-Agent-ID)")
    p.add_argument("--capability", default="shout", help="the tool's capability")
    p.add_argument("--token", default=os.environ.get("PEGASUS_AGENT_TOKEN", os.environ.get("PEGASUS_TOKEN", "")),
                   help="the daemon's --agent-token (or --token), if it has one")
    p.add_argument("--stop-after", type=int, default=0, help="stop after this many tasks (0: never)")
    a = p.parse_args()
    base = a.url.rstrip("/")

    def api(method, path, body=None, timeout=60):
        return call(base, method, path, a.id, a.token, body, timeout)

    patiently("register", lambda: api("PUT", "/api/v1/agents/" + a.id,
                                      {"capabilities": [a.capability], "max_tasks": 1}))
    print("registered", a.id, "for", a.capability, flush=True)
    done = 0
    while a.stop_after == 0 or done < a.stop_after:
        page = patiently("poll", lambda: api(
            "GET", "/api/v1/tasks?agent=%s&status=assigned&wait=30s" % a.id, timeout=45))
        for task in page.get("tasks") or []:
            tid = task["task_id"]
            try:
                report = ("complete", {"result": shout(arguments(task))})
            except (TypeError, ValueError) as e:
                report = ("fail", {"error": "bad arguments: %s" % e, "retry_eligible": False})
            try:
                patiently(report[0], lambda: api("POST", "/api/v1/tasks/%s/%s" % (tid, report[0]), report[1]))
            except Refused as e:
                # 409: the task is no longer this worker's (it timed out, or
                # the agent task was cancelled); the broker decided already.
                print("task", tid, "refused the report:", e, file=sys.stderr, flush=True)
            done += 1
            print(report[0], tid, flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
