#!/usr/bin/env python3
"""The sign-up example's worker (docs/processes.md): Python's standard library only.

    python3 examples/signup/signup_worker.py --port 8088

Strand POSTs one JSON request per state execution and per RPC and uses the JSON
answer as the decision (the worker protocol, strand.process/1):

  wait_until request: {kind: "wait_until", process, state, instance_id, attempt,
                      idempotency_key, input, attributes}
  wait_until answer:  {combine: "any_of" | "all_of", timer_ms?: N, queues?: [name, ...]}
  execute request: {kind: "execute", process, state, instance_id, attempt,
                    idempotency_key, input, attributes, command_results}
  execute answer:  {next: [state, ...]} | {complete: output} | {fail: error}
                   | {dead_end: true}, optionally with {attributes: {name: value}}
  rpc request:     {kind: "rpc", process, rpc, process_id, instance_id,
                    idempotency_key, input, attributes}
  rpc answer:      {output, attributes?: {...}, publish?: [{queue, message}]}

Any non-2xx answer (or no answer within the timeout) is a failed attempt: Strand
retries it on a durable timer with backoff and the same Idempotency-Key; the attempt
number travels apart, in the Strand-Attempt header (and "attempt" in the body). An
attempt that timed out may have acted already, so side effects are keyed by the
Idempotency-Key (see submit below: one email per key, however many attempts).

Routes besides the sign-up's own, for the demos in docs/processes.md:
  /demo/flaky     fails (503) until the third attempt, then completes
  /demo/branch    {next: input.branches} (several next states run in parallel)
  /demo/decide    answers input.decisions[state] as the decision
  /demo/rpc       answers an RPC with its input plus {output: "ok"} (next, publish, ...)
"""
import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def log(*parts):
    print(*parts, flush=True)


SENT = {}   # Idempotency-Key -> email: one verification email per call, not per attempt


def submit(req):
    """State 'submit': record the form, send the verification email, go to 'verify'."""
    email = req["input"].get("email")
    key = req.get("idempotency_key")
    if key in SENT:
        log(f"[{req['instance_id']}] attempt {req.get('attempt')}: email already sent for {key}")
    else:
        SENT[key] = email
        log(f"[{req['instance_id']}] sending a verification email to {email}")
    return {"attributes": {"email": email, "status": "waiting"}, "next": ["verify"]}


UNITS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000}


def duration_ms(text):
    """'24h', '5s', '250ms' -> milliseconds."""
    for unit in ("ms", "s", "m", "h", "d"):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * UNITS[unit]
    raise ValueError(f"bad duration {text!r}")


def verify_wait_until(req):
    """State 'verify' waits for a reminder timer or a 'verified' message, whichever first.
    The reminder comes after 24 h; input.reminder_after makes the clock short for a demo."""
    after = req["input"].get("reminder_after") or "24h"
    return {"combine": "any_of", "timer_ms": duration_ms(after), "queues": ["verified"]}


def verify(req):
    """State 'verify' runs when the 24 h timer fires or a 'verified' message arrives."""
    attrs, results = req["attributes"], req["command_results"]
    if results.get("fired") == "verified" or attrs.get("status") == "verified":
        message = results.get("verified") or {}
        source = attrs.get("verified_source") or message.get("source") or "email_link"
        log(f"[{req['instance_id']}] {attrs.get('email')} verified by {source}: welcome!")
        return {"attributes": {"status": "verified", "verified_source": source},
                "complete": {"email": attrs.get("email"), "verified_by": source,
                             "reminders": attrs.get("reminders", 0)}}
    reminders = (attrs.get("reminders") or 0) + 1
    log(f"[{req['instance_id']}] reminder {reminders} to {attrs.get('email')}")
    return {"attributes": {"reminders": reminders}, "next": ["verify"]}


def rpc_verify(req):
    """RPC 'verify': the user clicked the link; wake the 'verify' state through its queue."""
    if req["attributes"].get("status") == "verified":
        return {"output": "already verified"}
    source = (req.get("input") or {}).get("source", "rpc")
    return {"output": "done",
            "attributes": {"status": "verified", "verified_source": source},
            "publish": [{"queue": "verified", "message": {"source": source}}]}


def flaky(req):
    if req["attempt"] < 3:
        return 503, {"error": f"attempt {req['attempt']} fails on purpose"}
    return 200, {"complete": {"attempts": req["attempt"]}}


ROUTES = {
    "/signup/submit": submit,
    "/signup/verify/wait_until": verify_wait_until,
    "/signup/verify": verify,
    "/signup/rpc/verify": rpc_verify,
    "/demo/branch": lambda req: {"next": req["input"].get("branches", [])},
    "/demo/decide": lambda req: req["input"]["decisions"][req["state"]],
    "/demo/rpc": lambda req: dict(req["input"], output="ok"),
    "/demo/slow_rpc": lambda req: (time.sleep(req["input"]["sleep_ms"] / 1000), {"output": "slow"})[1],
}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self.answer(400, {"error": "the body is not JSON"})
        log(f"{self.path} {req.get('kind')} state={req.get('state') or req.get('rpc')}"
            f" key={self.headers.get('Idempotency-Key')}"
            f" attempt={self.headers.get('Strand-Attempt')}")
        if self.path == "/demo/flaky":
            return self.answer(*flaky(req))
        handler = ROUTES.get(self.path)
        if handler is None:
            return self.answer(404, {"error": "no such route"})
        try:
            return self.answer(200, handler(req))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            return self.answer(500, {"error": f"worker error: {e!r}"})

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):  # one line per call is printed above
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8088)
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    log(f"signup worker listening on http://{args.host}:{args.port}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
