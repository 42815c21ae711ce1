"""capbench's driver for NeMo Gym's token-capture code, run as a benchmark peer.

It imports Gym's own modules from the checkout on PYTHONPATH (nothing of Gym is
copied here), reads one JSON request per line on stdin and answers each with
one JSON line on stdout. Timings are taken inside Python around the Gym call
only: loading inputs and checking results are not timed. Gym's own log lines
go to stderr, never to stdout. See docs/gym-peer.md.
"""

import asyncio
import hashlib
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path


def _reply_stream():
    # Keep stdout for replies: anything Gym or a library prints goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr
    return out


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def op_info(req):
    from nemo_gym.token_id_capture import records

    return {
        "schema_version": records.TOKEN_ENTRY_RECORD_SCHEMA_VERSION,
        "module": records.__file__,
        "python": sys.version.split()[0],
    }


def op_consume(req):
    """Gym's trajectories_for_rollout: freeze, build and verdict of one rollout."""
    from nemo_gym.token_id_capture.consumer import trajectories_for_rollout

    directory = Path(req["dir"])
    built, wall, cpu = _timed(
        lambda: trajectories_for_rollout(req["rollout_id"], [directory], model=req.get("model", ""))
    )
    metrics = built.get("metrics") or {}
    return {
        "seconds": wall,
        "cpu_seconds": cpu,
        "mask_sample": bool(built.get("mask_sample")),
        "error": built.get("error") or "",
        "n_calls": int(metrics.get("n_calls", 0)),
        "chains": int(metrics.get("chains", 0)),
        "generated_tokens_delivered": int(metrics.get("generated_tokens_delivered", 0)),
    }


def _load_entries(path):
    from nemo_gym.token_id_capture.records import TokenEntry

    by_rollout = {}
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                entry = TokenEntry.model_validate(json.loads(line))
                by_rollout.setdefault(entry.rollout_id, []).append(entry)
    return list(by_rollout.values())


def op_put(req):
    """Gym's TokenCaptureStore writing every rollout of entries_file at once.

    mode "async": one coroutine per rollout awaiting store.put for each of its
    calls in order, as Gym's capture path does (put runs append on the default
    thread pool). mode "threads": one thread per rollout calling append.
    With "intent", each call first records its intent (begin_call), as the
    capture path does before dispatching a call.
    """
    from nemo_gym.token_id_capture.store import TokenCaptureStore

    groups = _load_entries(req["entries_file"])
    store = TokenCaptureStore(req["dir"])
    mode = req.get("mode", "async")
    intent = bool(req.get("intent", False))
    if mode == "async":

        async def one(entries):
            for entry in entries:
                if intent:
                    await store.begin_call(entry.rollout_id, entry.model_call_id)
                await store.put(entry)

        async def every():
            await asyncio.gather(*(one(g) for g in groups))

        run = lambda: asyncio.run(every())
    elif mode == "threads":
        failures = []

        def one(entries):
            try:
                for entry in entries:
                    if intent:
                        store._begin_call(entry.rollout_id, entry.model_call_id)
                    store.append(entry)
            except Exception as error:  # reported below, after every thread ends
                failures.append(repr(error))

        def run():
            threads = [threading.Thread(target=one, args=(g,)) for g in groups]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if failures:
                raise RuntimeError("append failed: " + failures[0])

    else:
        raise ValueError(f"unknown put mode {mode!r} (want async or threads)")
    _, wall, cpu = _timed(run)
    return {"seconds": wall, "cpu_seconds": cpu, "puts": sum(len(g) for g in groups)}


def op_read(req):
    """Freeze each rollout with Gym's store and describe what it read."""
    import orjson

    from nemo_gym.token_id_capture.store import TokenCaptureStore

    store = TokenCaptureStore(req["dir"])
    rollouts = {}
    for rollout_id in req["rollout_ids"]:
        snapshot = store.freeze_now(rollout_id)
        rollouts[rollout_id] = {
            "model_call_ids": [e.model_call_id for e in snapshot.entries],
            # Gym's canonical line of each entry as it parsed it.
            "entry_digests": [
                hashlib.sha256(orjson.dumps(e.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)).hexdigest()
                for e in snapshot.entries
            ],
            "incomplete": snapshot.incomplete,
        }
    return {"rollouts": rollouts}


OPS = {"info": op_info, "consume": op_consume, "put": op_put, "read": op_read}


def main():
    out = _reply_stream()
    for line in sys.stdin:
        if not line.strip():
            continue
        op = ""
        try:
            req = json.loads(line)
            op = req.get("op", "")
            if op not in OPS:
                raise ValueError(f"unknown op {op!r} (want one of {sorted(OPS)})")
            reply = {"ok": True, "op": op}
            reply.update(OPS[op](req))
        except Exception as error:
            traceback.print_exc(file=sys.stderr)
            reply = {"ok": False, "op": op, "error": f"{type(error).__name__}: {error}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
