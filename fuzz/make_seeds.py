#!/usr/bin/env python3
"""Writes the binary seeds of corpus/redis_replies (replies as Redis sends
them: RESP, the rings as little-endian doubles). Run from fuzz/."""
import os, struct

d = "corpus/redis_replies"
os.makedirs(d, exist_ok=True)

def bulk(b):
    return b"$%d\r\n%s\r\n" % (len(b), b)

def arr(items):
    return b"*%d\r\n" % len(items) + b"".join(items)

def ints(*xs):
    return b"".join(b":%d\r\n" % x for x in xs)

def f64s(*xs):
    return b"".join(struct.pack("<d", x) for x in xs)

def write(name, head, body):
    with open(os.path.join(d, name), "wb") as f:
        f.write(head + b"\n" + body)

# Flush reply to 2 keys: replayed, _, _, dropped, rings, crossings, hot
# version, previous sequence.
rings = f64s(1, 0, 7, 1) + f64s(0, 2, 9, 2, 10, 4)
write("flush_two_keys", b"flush 2", arr([b":0\r\n", b":0\r\n", b":0\r\n", b":3\r\n",
      bulk(rings), bulk(f64s(2, 12)), b":5\r\n", b":-1\r\n"]))
write("flush_nil_crossings", b"flush 1", arr([b":1\r\n", b":0\r\n", b":0\r\n", bulk(b"0"),
      bulk(f64s(0)), b"$-1\r\n", bulk(b"12"), b":41\r\n"]))
write("flush_huge_count", b"flush 1", arr([b":0\r\n", b":0\r\n", b":0\r\n", b":0\r\n",
      bulk(f64s(1e300, 0, 0, 0)), bulk(b""), b":0\r\n", b":0\r\n"]))
# Lease reply to 2 keys: replayed, epoch, us left, TIME (s, us), the
# grants (a double a key), then (key index, retry us) per refused key.
write("lease_two_keys", b"lease 2", arr([b":0\r\n", b":77\r\n", b":-5\r\n", bulk(b"12"),
      bulk(b"345"), bulk(f64s(8, 0)), b":2\r\n", b":250\r\n"]))
write("lease_replay", b"lease 1", arr([b":1\r\n", bulk(b"9007199254740993"), b":100\r\n",
      bulk(b"1700000000"), bulk(b"999999"), bulk(f64s(3))]))
# Hot read: version, full, then (key, until) pairs.
write("hot_full", b"hot", arr([b":4\r\n", b":1\r\n", bulk(b"alice"), bulk(b"1234"),
      bulk(b"bob"), bulk(b"1e3")]))
write("hot_bad_score", b"hot", arr([b":4\r\n", b":0\r\n", bulk(b"k"), bulk(b"-inf")]))
# TIME: seconds and microseconds, as bulk strings.
write("time", b"time 0 1000000 2000", arr([bulk(b"1700000000"), bulk(b"123456")]))
write("time_huge", b"time 0 18446744073709551615 18446744073709551615",
      arr([bulk(b"18446744073709551615"), bulk(b"999999")]))
# A stored ring: until, then (epoch, count) pairs.
write("ring", b"ring 0 10 3", f64s(0, 7, 1, 9, 2, 10, 4))
write("ring_saturated", b"ring 0 18446744073709551615 18446744073709551615",
      f64s(1, 1, 9.007199254740992e15, 2**63, 9.007199254740992e15))
# Not RESP: a tree built from the bytes.
write("tree", b"all 1", bytes([5, 8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 2, 0, 3, 1, 5, 4, 2, 0, 4]))
# A request's arguments: bytes (tag 0, length), two parts (tag 1), a
# number (tag 2, 8 bytes little-endian).
write("request", b"request", bytes([0, 7]) + b"EVALSHA" + bytes([1, 3]) + b"ns:" + bytes([1])
      + b"k" + bytes([2]) + struct.pack("<Q", 2**64 - 1) + bytes([0, 0]))
