#!/usr/bin/env python3
"""The attacks of issue #42 against a real `holdfast panel`, one after another, as an
operator would check them before exposing the panel:

    scripts/attack-panel.py [--exe build/release/apps/holdfast/holdfast] [--seconds 5]

Starts the panel on a throwaway SQLite file and runs each attack from 127.0.0.1 (or, for the
sign-in flood, from many loopback addresses) while a prober at 127.0.0.2 asks for /healthz
every 20 ms on a fresh connection and, for the sign-in flood, a user at 127.0.9.9 signs in.
For each attack it prints the panel's memory (resident, less the Argon2id work areas in use:
see soak-abuse.py) before, at its peak and 2 s after, the prober's p99 and its non-200
answers. Exits 1 when an attack misses issue #42's targets: memory +32 MiB at most at the
peak and back within 16 MiB after, /healthz p99 within 100 ms and every probe answered 200,
the legitimate sign-in within 1 s.
"""
import argparse
import importlib.util
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("soak_abuse", os.path.join(_here, "soak-abuse.py"))
soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(soak)

CHUNKED_HEAD = (b"POST /report HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                b"Content-Type: application/json\r\n\r\n")


def test_port():
    """A free port below the kernel's ephemeral range (32768 and up)."""
    for _ in range(100):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit("no free port below 32768")


def connect(port, source="127.0.0.1", rcvbuf=None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def flood_body(port, head, filler, most, stop):
    """Sends `head`, then `filler` until `most` bytes, the server closes, or `stop`."""
    try:
        s = connect(port)
        s.sendall(head)
        block = filler * (65536 // len(filler))
        sent = 0
        s.settimeout(1)
        while sent < most and not stop.is_set():
            try:
                sent += s.send(block)
            except socket.timeout:
                continue
        s.close()
    except OSError:
        pass


def flood_four(port, stop, head, filler, most):
    """Four flood_body() connections at once, again and again until `stop`."""
    while not stop.is_set():
        threads = [threading.Thread(target=flood_body, args=(port, head, filler, most, stop))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def attack_trailers(port, stop):
    flood_four(port, stop, CHUNKED_HEAD + b"2\r\n{}\r\n0\r\n", b"a:b\r\n", 4 << 20)


def attack_chunk_extension(port, stop):
    flood_four(port, stop, CHUNKED_HEAD + b"1;", b"a", 64 << 20)


def attack_slow_readers(port, stop):
    held = []
    request = b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 64
    while not stop.is_set() and len(held) < 1100:
        try:
            s = connect(port, rcvbuf=1)
            s.sendall(request)
            held.append(s)
        except OSError:
            time.sleep(0.01)
    stop.wait()
    for s in held:
        s.close()


def attack_healthz_flood(port, stop):
    def loop():
        s = None
        while not stop.is_set():
            try:
                if s is None:
                    s = connect(port)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                if not s.recv(65536):
                    s.close()
                    s = None
            except OSError:
                if s is not None:
                    s.close()
                s = None
    threads = [threading.Thread(target=loop) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def attack_wrong_passwords(port, stop, index=[0]):
    def loop(n):
        while not stop.is_set():
            index[0] += 1
            c = soak.Client(port, f"127.{10 + n}.{(index[0] >> 8) & 255}.{index[0] & 255 or 1}")
            c.request("POST", "/login", urllib.parse.urlencode(
                {"email": "Bartek.Tran@club.example", "password": f"guess{index[0]}"}),
                {"Content-Type": "application/x-www-form-urlencoded"})
    threads = [threading.Thread(target=loop, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def probe(port, stop, latencies, failures):
    while not stop.is_set():
        start = time.monotonic()
        status = 0
        try:
            s = connect(port, "127.0.0.2")
            s.settimeout(5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = s.recv(64)
            s.close()
            status = int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1 ") else 0
        except (OSError, ValueError, IndexError):
            pass
        latencies.append((time.monotonic() - start) * 1000)
        if status != 200:
            failures.append(status)
        time.sleep(0.02)


def sign_in_seconds(port):
    start = time.monotonic()
    c = soak.Client(port, "127.0.9.9")
    status, _, _ = c.request("POST", "/login", urllib.parse.urlencode(
        {"email": "Ada.Nowak@club.example", "password": "demo"}),
        {"Content-Type": "application/x-www-form-urlencoded"})
    return status, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", default="build/release/apps/holdfast/holdfast")
    ap.add_argument("--seconds", type=float, default=5, help="how long each attack lasts")
    args = ap.parse_args()
    # The slow readers hold 1,100 sockets on this side.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
    work = tempfile.mkdtemp(prefix="holdfast-attack-")
    port = test_port()
    log = open(os.path.join(work, "panel.log"), "w")
    panel = subprocess.Popen([args.exe, "panel", "--db", os.path.join(work, "club.db"),
                              "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    ok = True
    try:
        for _ in range(100):
            try:
                connect(port).close()
                break
            except OSError:
                time.sleep(0.1)
        attacks = [("trailers 4 MiB x4", attack_trailers),
                   ("chunk extension 64 MiB x4", attack_chunk_extension),
                   ("1,100 slow readers", attack_slow_readers),
                   ("/healthz flood, 64 keep-alive", attack_healthz_flood),
                   ("wrong passwords, many addresses", attack_wrong_passwords)]
        print("| attack | memory before | peak | after 2 s | /healthz p99 | not 200 | sign-in |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for name, attack in attacks:
            before = soak.rss_without_hash_areas_kib(panel.pid)
            stop = threading.Event()
            latencies, failures = [], []
            threads = [threading.Thread(target=attack, args=(port, stop)),
                       threading.Thread(target=probe, args=(port, stop, latencies, failures))]
            for t in threads:
                t.start()
            peak = before
            deadline = time.monotonic() + args.seconds
            signed = ""
            while time.monotonic() < deadline:
                peak = max(peak, soak.rss_without_hash_areas_kib(panel.pid))
                if attack is attack_wrong_passwords and not signed and \
                        time.monotonic() > deadline - args.seconds / 2:
                    status, took = sign_in_seconds(port)
                    signed = f"{status} in {took:.2f} s"
                    ok = ok and status == 303 and took <= 1.0
                time.sleep(0.05)
            stop.set()
            for t in threads:
                t.join()
            time.sleep(2)
            after = soak.rss_without_hash_areas_kib(panel.pid)
            latencies.sort()
            p99 = latencies[int(len(latencies) * 0.99)] if latencies else float("inf")
            print(f"| {name} | {before / 1024:.1f} MiB | +{(peak - before) / 1024:.1f} MiB | "
                  f"{(after - before) / 1024:+.1f} MiB | {p99:.1f} ms | "
                  f"{len(failures)} of {len(latencies)} | {signed or '-'} |", flush=True)
            ok = ok and peak - before <= 32 * 1024 and after - before <= 16 * 1024
            ok = ok and p99 <= 100 and not failures
        if panel.poll() is not None:
            print(f"the panel died: exit {panel.returncode}")
            ok = False
    finally:
        panel.terminate()
        panel.wait()
    print("attack-panel:", "every target met" if ok else "a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
