#!/usr/bin/env python3
"""An abuse soak of the demo panel: what a careless or hostile client does for minutes.

    scripts/soak-abuse.py [--seconds 600] [--exe build/release/apps/holdfast/holdfast]

Starts `holdfast panel` on a throwaway SQLite file and, from 8 threads, loops: sign in with the demo password (a new session each
time), sign in with a wrong password, pay with a fresh Idempotency-Key, sign out. Every
`--sample` seconds it prints the database's size on disk (file + WAL) and the panel's
memory: resident, less the Argon2id work areas in use (each sign-in's check holds 64 MiB
while it runs), at its least over the period (looked at four times a second); and the
plain resident size at its peak. At the end it prints the growth of both from the first sample after the
warm-up (30 s, or a tenth of the run) to the last, and exits 1 if the database grew by
20 MB or more or the memory by 10 MB or more (issue #32's targets for a 10-minute soak).
"""
import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# libsodium maps each Argon2id work area on its own (crypto_pwhash's memlimit: 64 MiB for
# the panel's interactive cost), and the kernel merges two side by side into one mapping.
ARGON2_AREA_KIB = 64 * 1024


def rss_without_hash_areas_kib(pid):
    """The resident memory less the Argon2id work areas in use at that moment: the
    anonymous mappings a whole number of 64 MiB long. They come and go with each sign-in
    (two at most at once), so the plain resident size jumps by 64 or 128 MiB at random."""
    total = 0
    area = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            head = fields[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                start, end = (int(x, 16) for x in head.split("-"))
                size_kib = (end - start) // 1024
                area = len(fields) < 6 and size_kib % ARGON2_AREA_KIB == 0
            elif head == "Rss:" and not area:
                total += int(fields[1])
    return total


def db_bytes(path):
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += os.path.getsize(path + suffix)
        except OSError:
            pass
    return total


class Client:
    def __init__(self, port, source):
        self.port = port
        self.source = source  # a loopback address of its own (127.0.0.0/8 is all loopback)
        self.conn = None

    def request(self, method, path, body=None, headers=None):
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30,
                                                          source_address=(self.source, 0))
                self.conn.request(method, path, body=body, headers=headers or {})
                r = self.conn.getresponse()
                data = r.read()
                return r.status, dict(r.getheaders()), data
            except (OSError, http.client.HTTPException):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
        return 0, {}, b""


def abuse(port, index, stop, counts, lock):
    # Sign-ins that succeed from an address of their own; wrong passwords from another (the
    # panel counts failures per address and per account, and refuses the rest with 429).
    c = Client(port, f"127.0.0.{index + 2}")
    wrong = Client(port, f"127.0.1.{index + 2}")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    good = urllib.parse.urlencode({"email": "Ada.Nowak@club.example", "password": "demo"})
    bad = urllib.parse.urlencode({"email": "Bartek.Tran@club.example", "password": "guess"})
    while not stop.is_set():
        status, headers, _ = c.request("POST", "/login", good, form)
        cookie = headers.get("Set-Cookie", "").split(";")[0]
        csrf = headers.get("X-CSRF-Token", "")
        wrong.request("POST", "/login", bad, form)
        if cookie:
            h = dict(form, Cookie=cookie)
            h["Idempotency-Key"] = uuid.uuid4().hex
            h["X-CSRF-Token"] = csrf
            pay = urllib.parse.urlencode({"amount_cents": "125", "method": "card"})
            c.request("POST", "/payments", pay, h)
            c.request("POST", "/logout", "", dict(h))
        with lock:
            counts["loops"] += 1
            counts["status_" + str(status)] = counts.get("status_" + str(status), 0) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--sample", type=float, default=30)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--exe", default="build/release/apps/holdfast/holdfast")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="holdfast-soak-")
    db = os.path.join(work, "club.db")
    port = free_port()
    log = open(os.path.join(work, "panel.log"), "w")
    panel = subprocess.Popen([args.exe, "panel", "--db", db, "--port", str(port)],
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        stop = threading.Event()
        lock = threading.Lock()
        counts = {"loops": 0}
        threads = [threading.Thread(target=abuse, args=(port, i, stop, counts, lock))
                   for i in range(args.threads)]
        for t in threads:
            t.start()
        start = time.time()
        warm = min(30.0, args.seconds / 10)
        base = None
        last = None
        while time.time() - start < args.seconds:
            # The memory four times a second, less the Argon2id work areas (above); the
            # floor of a period (its least) is what a leak would raise.
            period_end = min(start + args.seconds, time.time() + args.sample)
            floor = rss_without_hash_areas_kib(panel.pid)
            peak = rss_kib(panel.pid)
            while time.time() < period_end:
                time.sleep(min(0.25, max(0.0, period_end - time.time())))
                floor = min(floor, rss_without_hash_areas_kib(panel.pid))
                peak = max(peak, rss_kib(panel.pid))
            t = time.time() - start
            sample = (db_bytes(db), floor)
            with lock:
                loops = counts["loops"]
            print(f"{t:6.0f} s  loops {loops:7d}  database {sample[0] / 1e6:8.2f} MB  "
                  f"memory {floor / 1024:7.1f} MiB (resident, hashes included: up to {peak / 1024:.1f})", flush=True)
            if base is None and t >= warm:
                base = sample
            last = sample
        stop.set()
        for t in threads:
            t.join()
        base = base or last
        grew_db = (last[0] - base[0]) / 1e6
        grew_mem = (last[1] - base[1]) / 1024
        print(f"after the warm-up: database grew {grew_db:.2f} MB, memory (less the hash areas) {grew_mem:.1f} "
              f"MiB; {counts['loops']} loops; answers to sign-in: "
              + ", ".join(f"{k[7:]}: {v}" for k, v in sorted(counts.items()) if k.startswith("status_")))
        return 0 if grew_db < 20 and grew_mem < 10 else 1
    finally:
        panel.terminate()
        panel.wait(timeout=30)
        log.close()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
