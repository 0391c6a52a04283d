"""Whole-panel scoring in worker processes with a hard per-response time limit."""

import time

import pytest

from crossed_rlvr.eval.score import Item, columns, mathverify, readers, score_many, score_response


def test_score_many_matches_in_process_and_keeps_order():
    items = [Item(f"step {i}\n#### {i}", str(i), "hash") for i in range(150)]
    items += [Item(f"so \\boxed{{{i}}}", str(i + (i % 2)), "boxed") for i in range(50)]
    rows = score_many(items, workers=2, chunk_size=16)
    assert rows == [score_response(it.response, it.reference, it.request) for it in items]
    assert all(list(r) == columns() for r in rows)
    assert [r["strict_first_hash.answer"] for r in rows[:150]] == [str(i) for i in range(150)]
    assert sum(r["boxed_first.correct"] for r in rows[150:]) == 25


def _hanging_verify(text, reference):
    if text and "HANG" in text:
        time.sleep(60)
    return _real_verify(text, reference)


_real_verify = mathverify.verify_text


@pytest.mark.exclusive
def test_slow_reader_over_limit_is_unreadable_not_a_hang(monkeypatch):
    # Workers are forked, so they inherit the patched Math-Verify call.
    monkeypatch.setattr(mathverify, "verify_text", _hanging_verify)
    items = [Item("#### 18", "18"), Item("HANG #### 18", "18"), Item("\\boxed{7}", "7", "boxed")]
    start = time.monotonic()
    rows = score_many(items, workers=2, chunk_size=8, limit_s=1.0)
    assert time.monotonic() - start < 20
    assert rows[0]["math_verify.correct"] and not rows[0]["timed_out"]
    assert rows[2]["math_verify.correct"] and rows[2]["boxed_first.correct"]
    hung = rows[1]
    assert hung["timed_out"] is True
    assert hung["math_verify.answer"] is None and hung["math_verify.correct"] is False
    # The fast readers still read the response.
    assert hung["strict_first_hash.correct"] is True and hung["requested_payload"] is True


@pytest.mark.exclusive
def test_every_reader_over_limit_gives_unreadable_row(monkeypatch):
    monkeypatch.setattr(mathverify, "verify_text", _hanging_verify)
    strict = readers.READERS["strict_first_hash"]
    real = strict.extract

    def hanging_extract(response, request=None):
        if "HANG" in response:
            time.sleep(60)
        return real(response, request)

    monkeypatch.setattr(strict, "extract", hanging_extract)
    rows = score_many([Item("HANG #### 18", "18"), Item("#### 5", "5")], workers=1, limit_s=1.0)
    assert rows[0]["timed_out"] is True
    assert not any(v for k, v in rows[0].items() if k not in ("timed_out", "category", "read_cap_chars"))
    assert rows[0]["category"] == "neither"
    assert rows[1]["strict_first_hash.correct"] is True


@pytest.mark.parametrize("workers", [0, 1])
def test_in_process_and_pool_agree_on_math_verify(workers):
    rows = score_many([Item("The answer is $\\frac{3}{4}$.", "0.75")], workers=workers)
    assert rows[0]["math_verify.correct"] is True


def test_math_verify_limit_counts_cpu_time_not_a_busy_machines_wait(monkeypatch):
    """A reading's time limit counts the CPU time it used, so a machine too busy to run the reader
    promptly gives the same score as a quiet one; a reading that really works past the limit is cut."""
    import time

    import math_verify

    real_parse = math_verify.parse
    monkeypatch.setattr(mathverify, "PARSE_TIMEOUT", 0.3)

    def slow_to_be_scheduled(text, **kw):  # waits 0.6 s without computing, like a starved process
        time.sleep(0.6)
        return real_parse(text, **kw)

    monkeypatch.setattr(math_verify, "parse", slow_to_be_scheduled)
    assert mathverify.parse("$18$"), "waiting past the limit cut the reading short"

    def computing(text, **kw):
        end = time.process_time() + 5
        while time.process_time() < end:
            pass
        return real_parse(text, **kw)

    monkeypatch.setattr(math_verify, "parse", computing)
    t0 = time.process_time()
    assert mathverify.parse("$18$") == []
    assert time.process_time() - t0 < 2, "the CPU-time limit did not stop the reading"
    assert mathverify.verify(real_parse("$18$"), real_parse("$18$"))  # the timer is off again afterwards


def test_closing_the_pool_ends_even_where_pebbles_join_never_returns(monkeypatch):
    """pebble's join after stop can wait without end on a worker pipe nobody reads (seen once after a Ctrl-C): the
    scorer's close waits a bounded time, then kills its workers, so the command ends and exits."""
    import multiprocessing
    import threading

    from pebble.pool.process import WORKERS_NAME

    from crossed_rlvr.eval.score.panel import Scorer

    others = {p.pid for p in multiprocessing.active_children() if p.name == WORKERS_NAME}  # other tests' pools
    scorer = Scorer(workers=2)
    assert scorer.score([Item("#### 18", "18")])[0]["strict_first_hash.correct"] is True
    workers = [p for p in multiprocessing.active_children() if p.name == WORKERS_NAME and p.pid not in others]
    assert len(workers) == 2 and all(p.is_alive() for p in workers)
    never = threading.Event()
    monkeypatch.setattr(scorer.pool, "join", lambda timeout=None: never.wait())  # the hang, as pebble#147 has it
    closing = threading.Thread(target=scorer.close, kwargs={"join_s": 1.0}, daemon=True)
    closing.start()
    closing.join(6)
    assert not closing.is_alive()
    assert not any(p.is_alive() for p in workers)
    assert {p.pid for p in multiprocessing.active_children() if p.name == WORKERS_NAME} <= others  # theirs alone
